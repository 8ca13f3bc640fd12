//! Tickets: their numbers, statuses, fields, comments, alert links, time entries (with the
//! running timer) and parts, and moving one to another organization of the partner.
//!
//! Every change commits with its audit record. A ticket's number comes from its partner's row
//! in `ticket_counters`, taken in the creating transaction, so numbers are unique per partner
//! whatever the organization. Status changes follow `breeze_core::TicketStatus::can_move_to`
//! and are conditional on the status read, so two people closing and reopening at once cannot
//! both win. One running timer per user: a partial unique index refuses a second, so a timer
//! is a row, not a process's memory, and survives restarts.

use breeze_core::{
    Actor, AlertStatus, AuditEvent, Currency, DeviceId, Money, OrgId, PartnerId, Permission,
    Quantity, Severity, TicketPriority, TicketStatus, Timestamp, UserId, rbac,
    ticket::ticket_reference,
};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::{
    Result, StoreError,
    alerts::check_text,
    audit, ledger,
    sql::{Arg, Sql, Tx, escape_like, sql},
};

/// The longest subject.
pub(crate) const MAX_SUBJECT_CHARS: usize = 255;
/// The longest description or comment.
pub(crate) const MAX_BODY_CHARS: usize = 20_000;
/// The most tags a ticket carries, and the longest tag.
pub(crate) const MAX_TAGS: usize = 20;
pub(crate) const MAX_TAG_CHARS: usize = 50;
/// The largest page of tickets one listing returns.
pub const MAX_TICKET_PAGE: u32 = 100;
/// The longest time entry one log may record (a day and a half).
pub(crate) const MAX_ENTRY_MINUTES: i64 = 36 * 60;

/// A ticket as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Ticket {
    pub id: Uuid,
    pub org_id: OrgId,
    pub partner_id: PartnerId,
    pub number: i64,
    pub subject: String,
    pub description: String,
    pub category: Option<String>,
    #[sqlx(try_from = "String")]
    pub priority: TicketPriority,
    #[sqlx(try_from = "String")]
    pub status: TicketStatus,
    pub device_id: Option<DeviceId>,
    pub submitter: Option<String>,
    pub assignee_id: Option<UserId>,
    #[sqlx(json)]
    pub tags: Vec<String>,
    pub due_at: Option<Timestamp>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub resolved_at: Option<Timestamp>,
    pub closed_at: Option<Timestamp>,
}

impl Ticket {
    /// `T-1042`.
    pub fn reference(&self) -> String {
        ticket_reference(self.number)
    }
}

const TICKET_COLUMNS: &str = "id, org_id, partner_id, number, subject, description, category, \
    priority, status, device_id, submitter, assignee_id, tags, due_at, created_by, created_at, \
    updated_at, resolved_at, closed_at";

/// A ticket to open.
#[derive(Debug, Clone)]
pub struct NewTicket {
    pub subject: String,
    pub description: String,
    pub category: Option<String>,
    pub priority: TicketPriority,
    pub device_id: Option<DeviceId>,
    pub submitter: Option<String>,
    pub assignee_id: Option<UserId>,
    pub tags: Vec<String>,
    pub due_at: Option<Timestamp>,
    pub created_by: String,
}

/// Changes to a ticket's fields; `None` keeps the current value.
#[derive(Debug, Clone, Default)]
pub struct TicketUpdate {
    pub subject: Option<String>,
    pub description: Option<String>,
    pub category: Option<String>,
    pub priority: Option<TicketPriority>,
    pub device_id: Option<DeviceId>,
    pub submitter: Option<String>,
    pub tags: Option<Vec<String>>,
    pub due_at: Option<Timestamp>,
}

/// Which tickets a listing returns; every field narrows it.
#[derive(Debug, Clone, Default)]
pub struct TicketFilter {
    pub status: Option<TicketStatus>,
    /// Only tickets that still need work (not resolved or closed).
    pub active: bool,
    pub priority: Option<TicketPriority>,
    pub assignee: Option<UserId>,
    pub device: Option<DeviceId>,
    pub tag: Option<String>,
    /// A substring of the subject or description, case ignored.
    pub text: Option<String>,
}

/// One page of tickets, newest first, and where the next begins.
#[derive(Debug, Clone)]
pub struct TicketPage {
    pub tickets: Vec<Ticket>,
    /// The number to pass as `before` for the next page.
    pub next_before: Option<i64>,
}

/// A comment on a ticket: public (the customer sees it) or internal.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct TicketComment {
    pub id: Uuid,
    pub ticket_id: Uuid,
    pub author: String,
    pub author_user_id: UserId,
    pub body: String,
    pub internal: bool,
    pub created_at: Timestamp,
    pub edited_at: Option<Timestamp>,
}

const COMMENT_COLUMNS: &str =
    "id, ticket_id, author, author_user_id, body, internal, created_at, edited_at";

/// Whose comment an edit or delete may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentScope {
    /// Only the acting user's own.
    Own(UserId),
    /// Anyone's (the caller holds `tickets.manage`).
    Any,
}

/// An alert linked to a ticket, as the ticket shows it.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct LinkedAlert {
    pub alert_id: Uuid,
    pub title: String,
    #[sqlx(try_from = "String")]
    pub severity: Severity,
    #[sqlx(try_from = "String")]
    pub status: AlertStatus,
    pub linked_by: String,
    pub linked_at: Timestamp,
}

/// Time worked on a ticket: a finished entry, or the running timer (`ended_at` absent).
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct TimeEntry {
    pub id: Uuid,
    pub ticket_id: Uuid,
    pub user_id: UserId,
    pub actor: String,
    pub started_at: Timestamp,
    pub ended_at: Option<Timestamp>,
    pub minutes: Option<i64>,
    pub billable: bool,
    /// The hourly rate, in the currency's minor unit.
    pub rate_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub note: Option<String>,
    pub created_at: Timestamp,
    /// The invoice this entry was billed on.
    pub invoice_id: Option<Uuid>,
}

impl TimeEntry {
    /// The hourly rate as money.
    pub fn rate(&self) -> Money {
        Money::new(self.rate_minor, self.currency)
    }
}

const ENTRY_COLUMNS: &str = "id, ticket_id, user_id, actor, started_at, ended_at, minutes, \
    billable, rate_minor, currency, note, created_at, invoice_id";

/// Time to log or a timer to start.
#[derive(Debug, Clone)]
pub struct NewTime {
    pub user: UserId,
    pub actor: Actor,
    pub billable: bool,
    pub rate: Money,
    pub note: Option<String>,
}

/// A part used on a ticket (hardware, a licence), billable or not.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct TicketPart {
    pub id: Uuid,
    pub ticket_id: Uuid,
    pub description: String,
    pub quantity_milli: i64,
    pub unit_price_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub billable: bool,
    pub created_by: String,
    pub created_at: Timestamp,
    pub invoice_id: Option<Uuid>,
}

impl TicketPart {
    pub fn quantity(&self) -> Quantity {
        Quantity(self.quantity_milli)
    }
    pub fn unit_price(&self) -> Money {
        Money::new(self.unit_price_minor, self.currency)
    }
}

/// A part to record on a ticket.
#[derive(Debug, Clone)]
pub struct NewPart {
    pub description: String,
    pub quantity: Quantity,
    pub unit_price: Money,
    pub billable: bool,
    pub created_by: String,
}

const PART_COLUMNS: &str = "id, ticket_id, description, quantity_milli, unit_price_minor, \
    currency, billable, created_by, created_at, invoice_id";

fn check_body(field: &str, value: &str) -> Result<()> {
    if value.chars().count() > MAX_BODY_CHARS {
        return Err(StoreError::Invalid(format!(
            "{field} is longer than {MAX_BODY_CHARS} characters"
        )));
    }
    Ok(())
}

fn check_tags(tags: &[String]) -> Result<()> {
    if tags.len() > MAX_TAGS {
        return Err(StoreError::Invalid(format!(
            "a ticket carries at most {MAX_TAGS} tags"
        )));
    }
    tags.iter()
        .try_for_each(|t| check_text("tag", t, MAX_TAG_CHARS))
}

fn ticket_audit(
    audit: AuditEvent,
    org: OrgId,
    t: &Ticket,
    details: serde_json::Value,
) -> AuditEvent {
    let mut details = details;
    details["number"] = json!(t.reference());
    audit.org(org).resource(t.id).details(details)
}

impl crate::OrgTickets<'_> {
    async fn check_device(&self, device: Option<DeviceId>) -> Result<()> {
        if let Some(d) = device {
            self.whole().devices().get_device(d).await?;
        }
        Ok(())
    }

    /// The assignee must work in this organization.
    async fn check_assignee(&self, user: Option<UserId>) -> Result<()> {
        if let Some(u) = user
            && self.store.org_access(u, self.org).await?.is_none()
        {
            return Err(StoreError::NotFound("user"));
        }
        Ok(())
    }

    /// Opens a ticket with the next number of the organization's partner.
    pub async fn create_ticket(&self, new: NewTicket, audit: AuditEvent) -> Result<Ticket> {
        self.create_ticket_linked(new, None, audit).await
    }

    async fn create_ticket_linked(
        &self,
        new: NewTicket,
        alert: Option<Uuid>,
        audit: AuditEvent,
    ) -> Result<Ticket> {
        check_text("subject", &new.subject, MAX_SUBJECT_CHARS)?;
        check_body("description", &new.description)?;
        ledger::check_optional("category", new.category.as_deref(), MAX_TAG_CHARS)?;
        ledger::check_optional("submitter", new.submitter.as_deref(), MAX_SUBJECT_CHARS)?;
        check_tags(&new.tags)?;
        self.check_device(new.device_id).await?;
        self.check_assignee(new.assignee_id).await?;
        let partner = self.whole().tenancy().partner_id().await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        let number = ledger::next_number(&mut tx, "ticket_counters", partner).await?;
        sql(format!(
            "INSERT INTO tickets ({TICKET_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
             $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(partner)
        .bind(number)
        .bind(new.subject.as_str())
        .bind(new.description.as_str())
        .bind(new.category.as_deref())
        .bind(new.priority.as_str())
        .bind(TicketStatus::New.as_str())
        .bind(new.device_id)
        .bind(new.submitter.as_deref())
        .bind(new.assignee_id)
        .bind(Arg::json(&new.tags))
        .bind(new.due_at)
        .bind(new.created_by.as_str())
        .bind(now)
        .bind(now)
        .bind(None::<Timestamp>)
        .bind(None::<Timestamp>)
        .execute(&mut tx)
        .await?;
        if let Some(alert) = alert {
            insert_link(&mut tx, self.org, id, alert, &new.created_by, now).await?;
        }
        let audit = audit.org(self.org).resource(id).details(json!({
            "number": ticket_reference(number), "subject": new.subject,
            "priority": new.priority, "deviceId": new.device_id, "alertId": alert,
        }));
        ledger::commit(tx, &audit, now).await?;
        self.get_ticket(id).await
    }

    /// Opens a ticket for an alert of this organization, carrying its device, severity (as the
    /// priority) and message, and links the two.
    pub async fn create_from_alert(
        &self,
        alert: Uuid,
        created_by: &str,
        audit: AuditEvent,
    ) -> Result<Ticket> {
        let a = self.whole().alerts().get_alert(alert).await?;
        let new = NewTicket {
            subject: a.title.chars().take(MAX_SUBJECT_CHARS).collect(),
            description: a.message.chars().take(MAX_BODY_CHARS).collect(),
            category: Some("alert".into()),
            priority: TicketPriority::for_severity(a.severity),
            device_id: Some(a.device_id),
            submitter: None,
            assignee_id: None,
            tags: Vec::new(),
            due_at: None,
            created_by: created_by.to_owned(),
        };
        self.create_ticket_linked(new, Some(alert), audit).await
    }

    /// One ticket of this organization.
    pub async fn get_ticket(&self, id: Uuid) -> Result<Ticket> {
        ledger::one(self, "tickets", TICKET_COLUMNS, id, "ticket").await
    }

    /// The ticket of this organization with this number (`T-1042` is number 1042).
    pub async fn ticket_by_number(&self, number: i64) -> Result<Ticket> {
        ledger::by_number(self, "tickets", TICKET_COLUMNS, number, "ticket").await
    }

    /// Tickets newest first (by number), `limit` of them (at most [`MAX_TICKET_PAGE`]) before
    /// number `before`.
    pub async fn list_tickets(
        &self,
        filter: &TicketFilter,
        before: Option<i64>,
        limit: u32,
    ) -> Result<TicketPage> {
        let limit = limit.clamp(1, MAX_TICKET_PAGE);
        let mut q: Sql = sql(format!(
            "SELECT {TICKET_COLUMNS} FROM tickets WHERE org_id = $1"
        ))
        .bind(self.org);
        if let Some(b) = before {
            let p = q.arg(b);
            q.push(&format!(" AND number < {p}"));
        }
        if let Some(s) = filter.status {
            let p = q.arg(s.as_str());
            q.push(&format!(" AND status = {p}"));
        }
        if filter.active {
            q.push(" AND status NOT IN ('resolved', 'closed')");
        }
        if let Some(pr) = filter.priority {
            let p = q.arg(pr.as_str());
            q.push(&format!(" AND priority = {p}"));
        }
        if let Some(u) = filter.assignee {
            let p = q.arg(u);
            q.push(&format!(" AND assignee_id = {p}"));
        }
        if let Some(d) = filter.device {
            let p = q.arg(d);
            q.push(&format!(" AND device_id = {p}"));
        }
        if let Some(tag) = &filter.tag {
            // Tags are a JSON array of strings; match the quoted element.
            let quoted = serde_json::to_string(tag).unwrap_or_default();
            let p = q.arg(format!("%{}%", escape_like(&quoted)));
            q.push(&format!(" AND CAST(tags AS TEXT) LIKE {p} ESCAPE '\\'"));
        }
        if let Some(text) = &filter.text {
            let p = q.arg(format!("%{}%", escape_like(&text.to_lowercase())));
            q.push(&format!(
                " AND (LOWER(subject) LIKE {p} ESCAPE '\\' OR LOWER(description) LIKE {p} ESCAPE '\\')"
            ));
        }
        let p = q.arg(i64::from(limit) + 1);
        q.push(&format!(" ORDER BY number DESC LIMIT {p}"));
        let (tickets, next_before) =
            ledger::page(q.fetch_all(self).await?, limit, |t: &Ticket| t.number);
        Ok(TicketPage {
            tickets,
            next_before,
        })
    }

    /// Moves a ticket to `to` if a PSA allows it from its current status (a conflict
    /// otherwise), stamping when it was resolved or closed (cleared again when reopened).
    pub async fn set_status(
        &self,
        id: Uuid,
        to: TicketStatus,
        audit: AuditEvent,
    ) -> Result<Ticket> {
        let current = self.get_ticket(id).await?;
        if !current.status.can_move_to(to) {
            return Err(StoreError::Conflict(format!(
                "a {} ticket cannot move to {to}",
                current.status
            )));
        }
        let now = self.store.clock.now();
        let resolved_at = match to {
            TicketStatus::Resolved => Some(now),
            TicketStatus::Closed => current.resolved_at.or(Some(now)),
            _ => None,
        };
        let closed_at = (to == TicketStatus::Closed).then_some(now);
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE tickets SET status = $1, resolved_at = $2, closed_at = $3, updated_at = $4 \
             WHERE id = $5 AND org_id = $6 AND status = $7",
        )
        .bind(to.as_str())
        .bind(resolved_at)
        .bind(closed_at)
        .bind(now)
        .bind(id)
        .bind(self.org)
        .bind(current.status.as_str())
        .execute(&mut tx)
        .await?;
        ledger::changed(n, "the ticket changed meanwhile; read it again")?;
        let audit = ticket_audit(
            audit,
            self.org,
            &current,
            json!({ "from": current.status, "to": to }),
        );
        ledger::commit(tx, &audit, now).await?;
        self.get_ticket(id).await
    }

    /// Assigns the ticket to a user who works in this organization, or unassigns it.
    pub async fn assign(&self, id: Uuid, to: Option<UserId>, audit: AuditEvent) -> Result<Ticket> {
        let current = self.get_ticket(id).await?;
        self.check_assignee(to).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql("UPDATE tickets SET assignee_id = $1, updated_at = $2 WHERE id = $3 AND org_id = $4")
            .bind(to)
            .bind(now)
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        let audit = ticket_audit(
            audit,
            self.org,
            &current,
            json!({ "from": current.assignee_id, "to": to }),
        );
        ledger::commit(tx, &audit, now).await?;
        self.get_ticket(id).await
    }

    /// Changes a ticket's fields; the audit record names those changed.
    pub async fn update_ticket(
        &self,
        id: Uuid,
        update: TicketUpdate,
        audit: AuditEvent,
    ) -> Result<Ticket> {
        let current = self.get_ticket(id).await?;
        if let Some(s) = &update.subject {
            check_text("subject", s, MAX_SUBJECT_CHARS)?;
        }
        if let Some(d) = &update.description {
            check_body("description", d)?;
        }
        ledger::check_optional("category", update.category.as_deref(), MAX_TAG_CHARS)?;
        ledger::check_optional("submitter", update.submitter.as_deref(), MAX_SUBJECT_CHARS)?;
        if let Some(tags) = &update.tags {
            check_tags(tags)?;
        }
        self.check_device(update.device_id).await?;
        let changed = audit::changed_fields([
            ("subject", update.subject.is_some()),
            ("description", update.description.is_some()),
            ("category", update.category.is_some()),
            ("priority", update.priority.is_some()),
            ("deviceId", update.device_id.is_some()),
            ("submitter", update.submitter.is_some()),
            ("tags", update.tags.is_some()),
            ("dueDate", update.due_at.is_some()),
        ]);
        if changed.is_empty() {
            return Err(StoreError::Invalid("no field to change was given".into()));
        }
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "UPDATE tickets SET subject = $1, description = $2, category = $3, priority = $4, \
             device_id = $5, submitter = $6, tags = $7, due_at = $8, updated_at = $9 \
             WHERE id = $10 AND org_id = $11",
        )
        .bind(update.subject.as_deref().unwrap_or(&current.subject))
        .bind(
            update
                .description
                .as_deref()
                .unwrap_or(&current.description),
        )
        .bind(update.category.as_deref().or(current.category.as_deref()))
        .bind(update.priority.unwrap_or(current.priority).as_str())
        .bind(update.device_id.or(current.device_id))
        .bind(update.submitter.as_deref().or(current.submitter.as_deref()))
        .bind(Arg::json(update.tags.as_ref().unwrap_or(&current.tags)))
        .bind(update.due_at.or(current.due_at))
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        let audit = ticket_audit(audit, self.org, &current, json!({ "changed": changed }));
        ledger::commit(tx, &audit, now).await?;
        self.get_ticket(id).await
    }

    // ---- comments ----------------------------------------------------------------------

    /// Adds a comment by `author` (acting for `user`).
    pub async fn add_comment(
        &self,
        ticket: Uuid,
        author: &Actor,
        user: UserId,
        body: &str,
        internal: bool,
        audit: AuditEvent,
    ) -> Result<TicketComment> {
        check_text("body", body, MAX_BODY_CHARS)?;
        let t = self.get_ticket(ticket).await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO ticket_comments (org_id, {COMMENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, \
             $6, $7, $8, $9)"
        ))
        .bind(self.org)
        .bind(id)
        .bind(ticket)
        .bind(author.to_string())
        .bind(user)
        .bind(body)
        .bind(internal)
        .bind(now)
        .bind(None::<Timestamp>)
        .execute(&mut tx)
        .await?;
        sql("UPDATE tickets SET updated_at = $1 WHERE id = $2 AND org_id = $3")
            .bind(now)
            .bind(ticket)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        let audit = ticket_audit(
            audit,
            self.org,
            &t,
            json!({ "commentId": id, "internal": internal }),
        );
        ledger::commit(tx, &audit, now).await?;
        self.get_comment(ticket, id).await
    }

    async fn get_comment(&self, ticket: Uuid, id: Uuid) -> Result<TicketComment> {
        sql(format!(
            "SELECT {COMMENT_COLUMNS} FROM ticket_comments WHERE id = $1 AND ticket_id = $2 \
             AND org_id = $3"
        ))
        .bind(id)
        .bind(ticket)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("comment"))
    }

    /// A comment that `scope` may touch: another user's comment under [`CommentScope::Own`]
    /// is refused as forbidden (it is visible on the ticket, so "not found" would be a lie).
    async fn comment_in_scope(
        &self,
        ticket: Uuid,
        id: Uuid,
        scope: CommentScope,
    ) -> Result<TicketComment> {
        let c = self.get_comment(ticket, id).await?;
        if let CommentScope::Own(user) = scope
            && c.author_user_id != user
        {
            return Err(StoreError::Forbidden(
                "this comment is another user's: only its author, or a user with \
                 tickets.manage (the *_any_comment actions), may change it"
                    .into(),
            ));
        }
        Ok(c)
    }

    /// Replaces a comment's text.
    pub async fn edit_comment(
        &self,
        ticket: Uuid,
        id: Uuid,
        scope: CommentScope,
        body: &str,
        audit: AuditEvent,
    ) -> Result<TicketComment> {
        check_text("body", body, MAX_BODY_CHARS)?;
        let t = self.get_ticket(ticket).await?;
        let c = self.comment_in_scope(ticket, id, scope).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql("UPDATE ticket_comments SET body = $1, edited_at = $2 WHERE id = $3 AND org_id = $4")
            .bind(body)
            .bind(now)
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        let audit = ticket_audit(
            audit,
            self.org,
            &t,
            json!({ "commentId": id, "author": c.author, "previous": c.body }),
        );
        ledger::commit(tx, &audit, now).await?;
        self.get_comment(ticket, id).await
    }

    /// Deletes a comment; its text stays in the audit record.
    pub async fn delete_comment(
        &self,
        ticket: Uuid,
        id: Uuid,
        scope: CommentScope,
        audit: AuditEvent,
    ) -> Result<TicketComment> {
        let t = self.get_ticket(ticket).await?;
        let c = self.comment_in_scope(ticket, id, scope).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        audit::delete_row(&mut tx, self.org, "ticket_comments", id, "comment").await?;
        let audit = ticket_audit(
            audit,
            self.org,
            &t,
            json!({ "commentId": id, "author": c.author, "body": c.body }),
        );
        ledger::commit(tx, &audit, now).await?;
        Ok(c)
    }

    /// A ticket's comments, oldest first.
    pub async fn comments(&self, ticket: Uuid) -> Result<Vec<TicketComment>> {
        ledger::children(
            self,
            "ticket_comments",
            COMMENT_COLUMNS,
            "ticket_id",
            ticket,
            "created_at, id",
        )
        .await
    }

    // ---- alerts ------------------------------------------------------------------------

    /// Links an alert of this organization to the ticket; linking it twice is a conflict.
    pub async fn link_alert(
        &self,
        ticket: Uuid,
        alert: Uuid,
        by: &str,
        audit: AuditEvent,
    ) -> Result<Vec<LinkedAlert>> {
        let t = self.get_ticket(ticket).await?;
        self.whole().alerts().get_alert(alert).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        insert_link(&mut tx, self.org, ticket, alert, by, now)
            .await
            .map_err(|e| e.conflict_as(|| "the alert is linked to this ticket already".into()))?;
        let audit = ticket_audit(audit, self.org, &t, json!({ "alertId": alert }));
        ledger::commit(tx, &audit, now).await?;
        self.linked_alerts(ticket).await
    }

    /// Removes an alert's link; an alert that is not linked is not found.
    pub async fn unlink_alert(
        &self,
        ticket: Uuid,
        alert: Uuid,
        audit: AuditEvent,
    ) -> Result<Vec<LinkedAlert>> {
        let t = self.get_ticket(ticket).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n =
            sql("DELETE FROM ticket_alerts WHERE ticket_id = $1 AND alert_id = $2 AND org_id = $3")
                .bind(ticket)
                .bind(alert)
                .bind(self.org)
                .execute(&mut tx)
                .await?;
        if n == 0 {
            return Err(StoreError::NotFound("linked alert"));
        }
        let audit = ticket_audit(audit, self.org, &t, json!({ "alertId": alert }));
        ledger::commit(tx, &audit, now).await?;
        self.linked_alerts(ticket).await
    }

    /// The alerts linked to a ticket, oldest link first.
    pub async fn linked_alerts(&self, ticket: Uuid) -> Result<Vec<LinkedAlert>> {
        sql(
            "SELECT l.alert_id, a.title, a.severity, a.status, l.linked_by, l.linked_at \
             FROM ticket_alerts l JOIN alerts a ON a.id = l.alert_id AND a.org_id = l.org_id \
             WHERE l.ticket_id = $1 AND l.org_id = $2 ORDER BY l.linked_at, l.alert_id",
        )
        .bind(ticket)
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// The tickets an alert is linked to, newest first (an alert's page shows them).
    pub async fn tickets_of_alert(&self, alert: Uuid) -> Result<Vec<Ticket>> {
        sql(format!(
            "SELECT {} FROM tickets t JOIN ticket_alerts l ON l.ticket_id = t.id \
             AND l.org_id = t.org_id WHERE l.alert_id = $1 AND t.org_id = $2 \
             ORDER BY t.number DESC",
            prefixed("t", TICKET_COLUMNS)
        ))
        .bind(alert)
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    // ---- time --------------------------------------------------------------------------

    async fn open_for_work(&self, ticket: Uuid) -> Result<Ticket> {
        let t = self.get_ticket(ticket).await?;
        if t.status == TicketStatus::Closed {
            return Err(StoreError::Conflict(
                "the ticket is closed: reopen it to log time or parts".into(),
            ));
        }
        Ok(t)
    }

    /// Logs `minutes` of finished work that ended now.
    pub async fn log_time(
        &self,
        ticket: Uuid,
        minutes: i64,
        new: NewTime,
        audit: AuditEvent,
    ) -> Result<TimeEntry> {
        if !(1..=MAX_ENTRY_MINUTES).contains(&minutes) {
            return Err(StoreError::Invalid(format!(
                "minutes must be between 1 and {MAX_ENTRY_MINUTES}"
            )));
        }
        let now = self.store.clock.now();
        let started = now - chrono::Duration::minutes(minutes);
        self.insert_entry(ticket, started, Some((now, minutes)), new, audit)
            .await
    }

    /// Starts the acting user's timer on the ticket. A user runs one timer at a time, in any
    /// organization: a second is a conflict until the first is stopped.
    pub async fn start_timer(
        &self,
        ticket: Uuid,
        new: NewTime,
        audit: AuditEvent,
    ) -> Result<TimeEntry> {
        let now = self.store.clock.now();
        self.insert_entry(ticket, now, None, new, audit).await
    }

    async fn insert_entry(
        &self,
        ticket: Uuid,
        started: Timestamp,
        ended: Option<(Timestamp, i64)>,
        new: NewTime,
        audit: AuditEvent,
    ) -> Result<TimeEntry> {
        if new.rate.minor < 0 {
            return Err(StoreError::Invalid("the rate cannot be negative".into()));
        }
        if let Some(n) = &new.note {
            check_text("note", n, MAX_BODY_CHARS)?;
        }
        let t = self.open_for_work(ticket).await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO ticket_time_entries (org_id, {ENTRY_COLUMNS}) VALUES ($1, $2, $3, $4, \
             $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        ))
        .bind(self.org)
        .bind(id)
        .bind(ticket)
        .bind(new.user)
        .bind(new.actor.to_string())
        .bind(started)
        .bind(ended.map(|e| e.0))
        .bind(ended.map(|e| e.1))
        .bind(new.billable)
        .bind(new.rate.minor)
        .bind(new.rate.currency.code())
        .bind(new.note.as_deref())
        .bind(now)
        .bind(None::<Uuid>)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| "you have a timer running already: stop it first".into()))?;
        let audit = ticket_audit(
            audit,
            self.org,
            &t,
            json!({
                "entryId": id, "minutes": ended.map(|e| e.1), "timer": ended.is_none(),
                "billable": new.billable, "rate": new.rate,
            }),
        );
        ledger::commit(tx, &audit, now).await?;
        self.get_entry(id).await
    }

    async fn get_entry(&self, id: Uuid) -> Result<TimeEntry> {
        ledger::one(self, "ticket_time_entries", ENTRY_COLUMNS, id, "time entry").await
    }

    /// The user's running timer in this organization, if any.
    pub async fn running_timer(&self, user: UserId) -> Result<Option<TimeEntry>> {
        sql(format!(
            "SELECT {ENTRY_COLUMNS} FROM ticket_time_entries WHERE user_id = $1 AND org_id = $2 \
             AND ended_at IS NULL"
        ))
        .bind(user)
        .bind(self.org)
        .fetch_optional(self)
        .await
    }

    /// Stops the user's running timer on `ticket`: its minutes are the elapsed time rounded
    /// to the nearest whole minute (at least one).
    pub async fn stop_timer(
        &self,
        ticket: Uuid,
        user: UserId,
        audit: AuditEvent,
    ) -> Result<TimeEntry> {
        let t = self.get_ticket(ticket).await?;
        let entry = self
            .running_timer(user)
            .await?
            .filter(|e| e.ticket_id == ticket)
            .ok_or(StoreError::NotFound("running timer"))?;
        let now = self.store.clock.now();
        let seconds = (now - entry.started_at).num_seconds().max(0);
        let minutes = ((seconds + 30) / 60).max(1);
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE ticket_time_entries SET ended_at = $1, minutes = $2 WHERE id = $3 \
             AND org_id = $4 AND ended_at IS NULL",
        )
        .bind(now)
        .bind(minutes)
        .bind(entry.id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        if n == 0 {
            return Err(StoreError::NotFound("running timer"));
        }
        let audit = ticket_audit(
            audit,
            self.org,
            &t,
            json!({ "entryId": entry.id, "minutes": minutes }),
        );
        ledger::commit(tx, &audit, now).await?;
        self.get_entry(entry.id).await
    }

    /// A ticket's time entries, oldest first.
    pub async fn time_entries(&self, ticket: Uuid) -> Result<Vec<TimeEntry>> {
        ledger::children(
            self,
            "ticket_time_entries",
            ENTRY_COLUMNS,
            "ticket_id",
            ticket,
            "started_at, id",
        )
        .await
    }

    // ---- parts -------------------------------------------------------------------------

    /// Records a part used on the ticket.
    pub async fn add_part(
        &self,
        ticket: Uuid,
        part: NewPart,
        audit: AuditEvent,
    ) -> Result<TicketPart> {
        let NewPart {
            description,
            quantity,
            unit_price,
            billable,
            created_by: by,
        } = part;
        let (description, by) = (description.as_str(), by.as_str());
        check_text("description", description, MAX_SUBJECT_CHARS)?;
        if quantity.0 <= 0 || unit_price.minor < 0 {
            return Err(StoreError::Invalid(
                "a part's quantity is positive and its price not negative".into(),
            ));
        }
        // The amount must be computable: refuse what would overflow when invoiced.
        breeze_core::money::line_amount(quantity, unit_price)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let t = self.open_for_work(ticket).await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO ticket_parts (org_id, {PART_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, \
             $7, $8, $9, $10, $11)"
        ))
        .bind(self.org)
        .bind(id)
        .bind(ticket)
        .bind(description)
        .bind(quantity.0)
        .bind(unit_price.minor)
        .bind(unit_price.currency.code())
        .bind(billable)
        .bind(by)
        .bind(now)
        .bind(None::<Uuid>)
        .execute(&mut tx)
        .await?;
        let audit = ticket_audit(
            audit,
            self.org,
            &t,
            json!({ "partId": id, "description": description, "quantity": quantity.decimal(),
                    "unitPrice": unit_price, "billable": billable }),
        );
        ledger::commit(tx, &audit, now).await?;
        ledger::one(self, "ticket_parts", PART_COLUMNS, id, "part").await
    }

    /// A ticket's parts, oldest first.
    pub async fn parts(&self, ticket: Uuid) -> Result<Vec<TicketPart>> {
        ledger::children(
            self,
            "ticket_parts",
            PART_COLUMNS,
            "ticket_id",
            ticket,
            "created_at, id",
        )
        .await
    }

    /// What this organization's tickets have to bill in `[start, end)`: billable time entries
    /// that ended then and billable parts recorded then, neither invoiced yet.
    pub(crate) async fn billable_in(
        &self,
        start: Timestamp,
        end: Timestamp,
    ) -> Result<(Vec<TimeEntry>, Vec<TicketPart>)> {
        let entries = sql(format!(
            "SELECT {ENTRY_COLUMNS} FROM ticket_time_entries WHERE org_id = $1 AND billable \
             AND invoice_id IS NULL AND ended_at IS NOT NULL AND ended_at >= $2 AND ended_at < $3 \
             ORDER BY ended_at, id LIMIT $4"
        ))
        .bind(self.org)
        .bind(start)
        .bind(end)
        .bind(crate::invoices::MAX_LINES + 1)
        .fetch_all(self)
        .await?;
        let parts = sql(format!(
            "SELECT {PART_COLUMNS} FROM ticket_parts WHERE org_id = $1 AND billable \
             AND invoice_id IS NULL AND created_at >= $2 AND created_at < $3 \
             ORDER BY created_at, id LIMIT $4"
        ))
        .bind(self.org)
        .bind(start)
        .bind(end)
        .bind(crate::invoices::MAX_LINES + 1)
        .fetch_all(self)
        .await?;
        Ok((entries, parts))
    }

    // ---- moving ------------------------------------------------------------------------

    /// Moves a ticket to organization `to` of the same partner, with its comments, time and
    /// parts. Its device and alert links name the old organization's records, so they are
    /// dropped (the audit record keeps them). A ticket with invoiced time or parts, or an
    /// invoice, stays where it was billed. The destination must be one where `mover` holds
    /// `tickets.manage`: the guard cleared the call in this organization only, and nobody
    /// may push work into an organization they could not manage it in.
    pub async fn move_ticket(
        &self,
        id: Uuid,
        to: OrgId,
        mover: UserId,
        audit: AuditEvent,
    ) -> Result<Ticket> {
        let t = self.get_ticket(id).await?;
        if to == self.org {
            return Err(StoreError::Invalid(
                "the ticket is in that organization already".into(),
            ));
        }
        let dest = self.store.org(to).tenancy().organization().await;
        let same_partner = matches!(&dest, Ok(o) if o.partner_id == t.partner_id);
        let allowed = match self.store.org_access(mover, to).await? {
            Some(access) => rbac::check(access.permissions, Permission::TicketsManage).is_ok(),
            None => false,
        };
        if !same_partner || !allowed {
            return Err(StoreError::NotFound("organization"));
        }
        let billed: i64 = sql(
            "SELECT (SELECT COUNT(*) FROM ticket_time_entries WHERE ticket_id = $1 \
             AND org_id = $2 AND invoice_id IS NOT NULL) + (SELECT COUNT(*) FROM ticket_parts \
             WHERE ticket_id = $1 AND org_id = $2 AND invoice_id IS NOT NULL) + \
             (SELECT COUNT(*) FROM invoices WHERE ticket_id = $1 AND org_id = $2)",
        )
        .bind(id)
        .bind(self.org)
        .fetch_scalar(self)
        .await?;
        if billed > 0 {
            return Err(StoreError::Conflict(
                "the ticket has been invoiced here: it stays with the organization billed".into(),
            ));
        }
        let links = self.linked_alerts(id).await?;
        let now = self.store.clock.now();
        // The row changes organization, which the tenant scope of either side cannot write
        // (row security checks the new row against the scope): the system pool does it.
        let mut tx = Tx::begin(&self.store.pool).await?;
        sql("DELETE FROM ticket_alerts WHERE ticket_id = $1 AND org_id = $2")
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        let n = sql(
            "UPDATE tickets SET org_id = $1, device_id = NULL, updated_at = $2 \
             WHERE id = $3 AND org_id = $4",
        )
        .bind(to)
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await?;
        if n == 0 {
            return Err(StoreError::NotFound("ticket"));
        }
        let details = json!({
            "number": t.reference(), "from": self.org, "to": to, "deviceId": t.device_id,
            "unlinkedAlerts": links.iter().map(|l| l.alert_id).collect::<Vec<_>>(),
        });
        let leaving = audit
            .clone()
            .org(self.org)
            .resource(id)
            .details(details.clone());
        audit::insert(&mut tx, &leaving, now).await?;
        let arriving = audit.org(to).resource(id).details(details);
        ledger::commit(tx, &arriving, now).await?;
        self.store.org(to).tickets().get_ticket(id).await
    }
}

/// `t.a, t.b, …` for a column list.
fn prefixed(alias: &str, columns: &str) -> String {
    columns
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn insert_link(
    tx: &mut Tx,
    org: OrgId,
    ticket: Uuid,
    alert: Uuid,
    by: &str,
    now: Timestamp,
) -> Result<()> {
    sql(
        "INSERT INTO ticket_alerts (ticket_id, alert_id, org_id, linked_by, linked_at) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(ticket)
    .bind(alert)
    .bind(org)
    .bind(by)
    .bind(now)
    .execute(tx)
    .await?;
    Ok(())
}
