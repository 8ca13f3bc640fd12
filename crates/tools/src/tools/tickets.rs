//! `manage_tickets`: the ticket lifecycle.
//!
//! Reading (list, get) is Tier 1; creating, commenting, assigning, changing status or fields,
//! linking alerts, making a ticket from an alert, recording parts and editing or deleting
//! comments are Tier 2; time tracking (log, start and stop a timer) and moving a ticket to
//! another organization of the partner are Tier 3. Editing or deleting *another user's*
//! comment is its own action (`edit_any_comment`, `delete_any_comment`) needing
//! `tickets.manage`, so the guard decides it like every other permission; the plain actions
//! reach only the caller's own comments. Tickets, alerts and comments of another organization
//! are "not found", like missing ones.

use breeze_core::{DeviceId, OrgId, Permission, TicketPriority, TicketStatus, UserId};
use breeze_store::{
    CommentScope, LinkedAlert, NewPart, NewTicket, NewTime, StoreError, Ticket, TicketComment,
    TicketFilter, TicketPart, TicketUpdate, TimeEntry,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{
    args::{time_arg, uuid_or_missing},
    ledger::{self, MoneyView, Named},
    parse_uuid,
};
use crate::reach::{self, Reach};
use crate::{Pin, Registry, Rendered, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<ManageTickets>();
}

const TICKET_NOT_FOUND: &str = "Ticket not found or access denied";

crate::actions! {
    // What `manage_tickets` does, each action at the tier the specification gives it.
    pub(crate) enum TicketAction {
        List = "list" => (T1, Read, TicketsRead),
        Get = "get" => (T1, Read, TicketsRead),
        Create = "create" => (T2, Create, TicketsWrite),
        CreateFromAlert = "create_from_alert" => (T2, Create, TicketsWrite),
        Comment = "comment" => (T2, Create, TicketsWrite),
        Assign = "assign" => (T2, Update, TicketsWrite),
        UpdateStatus = "update_status" => (T2, Update, TicketsWrite),
        Update = "update" => (T2, Update, TicketsWrite),
        LinkAlert = "link_alert" => (T2, Update, TicketsWrite),
        UnlinkAlert = "unlink_alert" => (T2, Update, TicketsWrite),
        AddPart = "add_part" => (T2, Create, TicketsWrite),
        EditComment = "edit_comment" => (T2, Update, TicketsWrite),
        DeleteComment = "delete_comment" => (T2, Delete, TicketsWrite),
        EditAnyComment = "edit_any_comment" => (T2, Update, TicketsManage),
        DeleteAnyComment = "delete_any_comment" => (T2, Delete, TicketsManage),
        LogTime = "log_time" => (T3, Create, TicketsWrite),
        StartTimer = "start_timer" => (T3, Create, TicketsWrite),
        StopTimer = "stop_timer" => (T3, Update, TicketsWrite),
        Move = "move" => (T3, Update, TicketsManage),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StatusArg {
    // list only: not resolved or closed
    Active,
    New,
    Open,
    Pending,
    OnHold,
    Resolved,
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PriorityArg {
    Low,
    Normal,
    High,
    Urgent,
}

impl From<PriorityArg> for TicketPriority {
    fn from(p: PriorityArg) -> Self {
        match p {
            PriorityArg::Low => TicketPriority::Low,
            PriorityArg::Normal => TicketPriority::Normal,
            PriorityArg::High => TicketPriority::High,
            PriorityArg::Urgent => TicketPriority::Urgent,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TicketsInput {
    action: TicketAction,
    /// A UUID or a number such as T-1042.
    #[schemars(length(min = 1, max = 36))]
    ticket_id: Option<String>,
    #[schemars(length(min = 1, max = 255))]
    subject: Option<String>,
    /// Also a part's description.
    #[schemars(length(max = 20000))]
    description: Option<String>,
    #[schemars(length(min = 1, max = 50))]
    category: Option<String>,
    priority: Option<PriorityArg>,
    /// update_status: the new status; list: a filter (active = not resolved or closed).
    status: Option<StatusArg>,
    /// assign (absent: unassign); list filter.
    #[schemars(length(min = 36, max = 36))]
    assignee_id: Option<String>,
    #[schemars(length(min = 36, max = 36))]
    device_id: Option<String>,
    #[schemars(length(min = 1, max = 255))]
    submitter: Option<String>,
    #[schemars(length(max = 20))]
    tags: Option<Vec<String>>,
    /// list filter.
    #[schemars(length(min = 1, max = 50))]
    tag: Option<String>,
    /// list filter: in subject or description.
    #[schemars(length(min = 1, max = 200))]
    text: Option<String>,
    /// RFC 3339.
    #[schemars(length(max = 40))]
    due_date: Option<String>,
    #[schemars(length(min = 36, max = 36))]
    alert_id: Option<String>,
    #[schemars(length(min = 36, max = 36))]
    comment_id: Option<String>,
    /// comment, edit_*comment.
    #[schemars(length(min = 1, max = 20000))]
    body: Option<String>,
    /// comment: internal (not shown to the customer); default false.
    internal: Option<bool>,
    /// log_time.
    #[schemars(range(min = 1, max = 2160))]
    minutes: Option<u32>,
    /// log_time, start_timer, add_part; default true.
    billable: Option<bool>,
    /// Hourly rate (time) as a decimal string, e.g. "95.00".
    #[schemars(length(min = 1, max = 24))]
    rate: Option<String>,
    /// add_part: unit price as a decimal string.
    #[schemars(length(min = 1, max = 24))]
    unit_price: Option<String>,
    /// add_part: decimal, default "1".
    #[schemars(length(min = 1, max = 24))]
    quantity: Option<String>,
    /// ISO 4217 code of rate or unitPrice, e.g. USD.
    #[schemars(length(min = 3, max = 3))]
    currency: Option<String>,
    #[schemars(length(min = 1, max = 2000))]
    note: Option<String>,
    /// move: the destination organization (same partner).
    #[schemars(length(min = 36, max = 36))]
    target_org_id: Option<String>,
    /// list; default 25.
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
    /// list: the last page's nextCursor.
    #[schemars(length(max = 40))]
    cursor: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct CommentView {
    id: String,
    author: String,
    body: String,
    internal: bool,
    created_at: String,
    edited_at: Option<String>,
}

impl From<TicketComment> for CommentView {
    fn from(c: TicketComment) -> Self {
        Self {
            id: c.id.to_string(),
            author: c.author,
            body: c.body,
            internal: c.internal,
            created_at: c.created_at.to_rfc3339(),
            edited_at: c.edited_at.map(|t| t.to_rfc3339()),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct AlertLinkView {
    alert_id: String,
    title: String,
    severity: String,
    status: String,
    linked_at: String,
}

impl From<LinkedAlert> for AlertLinkView {
    fn from(l: LinkedAlert) -> Self {
        Self {
            alert_id: l.alert_id.to_string(),
            title: l.title,
            severity: l.severity.to_string(),
            status: l.status.to_string(),
            linked_at: l.linked_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct TimeView {
    id: String,
    user_id: String,
    actor: String,
    started_at: String,
    /// Absent while the timer runs.
    ended_at: Option<String>,
    minutes: Option<i64>,
    billable: bool,
    rate: MoneyView,
    note: Option<String>,
    invoiced: bool,
}

impl From<TimeEntry> for TimeView {
    fn from(e: TimeEntry) -> Self {
        Self {
            id: e.id.to_string(),
            user_id: e.user_id.to_string(),
            rate: e.rate().into(),
            actor: e.actor,
            started_at: e.started_at.to_rfc3339(),
            ended_at: e.ended_at.map(|t| t.to_rfc3339()),
            minutes: e.minutes,
            billable: e.billable,
            note: e.note,
            invoiced: e.invoice_id.is_some(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct PartView {
    id: String,
    description: String,
    quantity: String,
    unit_price: MoneyView,
    billable: bool,
    invoiced: bool,
}

impl From<TicketPart> for PartView {
    fn from(p: TicketPart) -> Self {
        Self {
            id: p.id.to_string(),
            quantity: p.quantity().decimal(),
            unit_price: p.unit_price().into(),
            description: p.description,
            billable: p.billable,
            invoiced: p.invoice_id.is_some(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct TicketView {
    id: String,
    /// e.g. T-1042, unique per partner.
    number: String,
    org_id: String,
    subject: String,
    description: String,
    category: Option<String>,
    priority: String,
    status: String,
    device_id: Option<String>,
    submitter: Option<String>,
    assignee_id: Option<String>,
    tags: Vec<String>,
    due_date: Option<String>,
    created_by: String,
    created_at: String,
    updated_at: String,
    resolved_at: Option<String>,
    closed_at: Option<String>,
    /// get and changes: oldest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    comments: Option<Vec<CommentView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alerts: Option<Vec<AlertLinkView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_entries: Option<Vec<TimeView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parts: Option<Vec<PartView>>,
}

impl From<Ticket> for TicketView {
    fn from(t: Ticket) -> Self {
        Self {
            id: t.id.to_string(),
            number: t.reference(),
            org_id: t.org_id.to_string(),
            subject: t.subject,
            description: t.description,
            category: t.category,
            priority: t.priority.to_string(),
            status: t.status.to_string(),
            device_id: t.device_id.map(|d| d.to_string()),
            submitter: t.submitter,
            assignee_id: t.assignee_id.map(|u| u.to_string()),
            tags: t.tags,
            due_date: t.due_at.map(|d| d.to_rfc3339()),
            created_by: t.created_by,
            created_at: t.created_at.to_rfc3339(),
            updated_at: t.updated_at.to_rfc3339(),
            resolved_at: t.resolved_at.map(|d| d.to_rfc3339()),
            closed_at: t.closed_at.map(|d| d.to_rfc3339()),
            comments: None,
            alerts: None,
            time_entries: None,
            parts: None,
        }
    }
}

/// What each action returns; one object with the fields that apply.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TicketsOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    tickets: Option<Vec<TicketView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ticket: Option<TicketView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    comment: Option<CommentView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_entry: Option<TimeView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    showing: Option<usize>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn ticket_missing(e: StoreError) -> ToolError {
    match e {
        StoreError::NotFound("ticket") => ToolError::not_found(TICKET_NOT_FOUND),
        StoreError::NotFound("alert") => ToolError::not_found("Alert not found or access denied"),
        StoreError::NotFound("device") => ToolError::not_found(super::DEVICE_NOT_FOUND),
        StoreError::NotFound("user") => {
            ToolError::not_found("User not found, or does not work in this organization")
        }
        other => other.into(),
    }
}

/// A ticket named by UUID or by number (`T-1042`, `1042`).
pub(crate) async fn resolve_ticket<R: Reach>(
    cx: &ToolCx<'_, R>,
    raw: Option<&str>,
) -> Result<Ticket, ToolError> {
    let tickets = cx.tickets();
    match ledger::named(raw, "ticketId", "T-", TICKET_NOT_FOUND)? {
        Named::Number(n) => tickets.ticket_by_number(n).await,
        Named::Id(id) => tickets.get_ticket(id).await,
    }
    .map_err(ticket_missing)
}

fn user_arg(field: &str, raw: Option<&str>) -> Result<Option<UserId>, ToolError> {
    raw.map(|u| parse_uuid(field, u).map(UserId)).transpose()
}

fn device_arg(raw: Option<&str>) -> Result<Option<DeviceId>, ToolError> {
    raw.map(|d| {
        Uuid::parse_str(d)
            .map(DeviceId)
            .map_err(|_| ToolError::not_found(super::DEVICE_NOT_FOUND))
    })
    .transpose()
}

async fn full_view<R: Reach>(cx: &ToolCx<'_, R>, t: Ticket) -> Result<TicketView, ToolError> {
    let tickets = cx.tickets();
    let id = t.id;
    let mut view = TicketView::from(t);
    view.comments = Some(ledger::views(tickets.comments(id).await?));
    view.alerts = Some(ledger::views(tickets.linked_alerts(id).await?));
    view.time_entries = Some(ledger::views(tickets.time_entries(id).await?));
    view.parts = Some(ledger::views(tickets.parts(id).await?));
    Ok(view)
}

impl TicketsInput {
    fn new_time<R: Reach>(&self, cx: &ToolCx<'_, R>) -> Result<NewTime, ToolError> {
        Ok(NewTime {
            user: cx.user,
            actor: cx.actor.clone(),
            billable: self.billable.unwrap_or(true),
            rate: ledger::money_arg(
                self.rate.as_deref(),
                "rate",
                ledger::currency_arg(self.currency.as_deref())?,
            )?,
            note: self.note.clone(),
        })
    }

    fn comment_id(&self) -> Result<Uuid, ToolError> {
        uuid_or_missing(
            self.comment_id.as_deref(),
            "commentId",
            "Comment not found or access denied",
        )
    }

    fn alert_id(&self) -> Result<Uuid, ToolError> {
        uuid_or_missing(
            self.alert_id.as_deref(),
            "alertId",
            "Alert not found or access denied",
        )
    }

    fn body(&self) -> Result<&str, ToolError> {
        self.body
            .as_deref()
            .ok_or_else(|| ToolError::invalid("body is required for this action"))
    }
}

pub(crate) struct ManageTickets;

impl Tool for ManageTickets {
    const NAME: &'static str = "manage_tickets";
    const TITLE: &'static str = "Manage tickets";
    const DESCRIPTION: &'static str = "Tickets (numbers like T-1042, unique per partner). list (filters, newest first)|get (comments, alerts, time, parts); create|create_from_alert|comment|assign|update_status (new, open, pending, on_hold, resolved, closed)|update|link_alert|unlink_alert|add_part|edit_comment|delete_comment (own)|edit_any_comment|delete_any_comment (tickets.manage) Tier 2; log_time|start_timer|stop_timer|move (another organization of the partner) Tier 3. Money: decimal string + ISO 4217 currency.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::TicketsRead;
    type Actions = TicketAction;
    type Input = TicketsInput;
    type Output = Rendered<TicketsOutput>;
    type Reach = reach::Tickets;

    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        // Everything a Tier 3 call needs is checked before a person is asked to approve it.
        let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
        match input.action {
            TicketAction::LogTime | TicketAction::StartTimer => {
                input.new_time(cx)?;
            }
            TicketAction::StopTimer => {
                let running = cx.tickets().running_timer(cx.user).await?;
                if running.is_none_or(|e| e.ticket_id != t.id) {
                    return Err(ToolError::not_found(
                        "You have no timer running on this ticket",
                    ));
                }
            }
            TicketAction::Move => {
                let to = input
                    .target_org_id
                    .as_deref()
                    .ok_or_else(|| ToolError::invalid("targetOrgId is required for move"))?;
                parse_uuid("targetOrgId", to)?;
            }
            _ => {}
        }
        Ok(Some(Pin {
            summary: format!("{}: {}", t.reference(), t.subject),
            data: serde_json::json!({ "ticket": t.reference(), "status": t.status,
                                      "subject": t.subject }),
        }))
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let tickets = cx.tickets();
        let audit = |action: &str| ledger::audit(cx, "ticket", action);
        let by = cx.actor.to_string();
        let done = |message: String, ticket: TicketView| {
            Rendered::of(&TicketsOutput {
                message: Some(message),
                ticket: Some(ticket),
                ..Default::default()
            })
        };
        match input.action {
            TicketAction::List => {
                let (status, active) = match input.status {
                    None => (None, false),
                    Some(StatusArg::Active) => (None, true),
                    Some(s) => (Some(status_of(s)?), false),
                };
                let filter = TicketFilter {
                    status,
                    active,
                    priority: input.priority.map(Into::into),
                    assignee: user_arg("assigneeId", input.assignee_id.as_deref())?,
                    device: device_arg(input.device_id.as_deref())?,
                    tag: input.tag.clone(),
                    text: input.text.clone(),
                };
                let before = ledger::cursor::<i64>(input.cursor.as_deref())?;
                let page = tickets
                    .list_tickets(&filter, before, input.limit.unwrap_or(25))
                    .await?;
                let views: Vec<TicketView> = page.tickets.into_iter().map(Into::into).collect();
                Rendered::of(&TicketsOutput {
                    showing: Some(views.len()),
                    tickets: Some(views),
                    next_cursor: page.next_before.map(|n| n.to_string()),
                    ..Default::default()
                })
            }
            TicketAction::Get => {
                let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                Rendered::of(&TicketsOutput {
                    ticket: Some(full_view(cx, t).await?),
                    ..Default::default()
                })
            }
            TicketAction::Create => {
                let subject = input
                    .subject
                    .clone()
                    .ok_or_else(|| ToolError::invalid("subject is required for create"))?;
                let new = NewTicket {
                    subject,
                    description: input.description.clone().unwrap_or_default(),
                    category: input.category.clone(),
                    priority: input.priority.map_or(TicketPriority::Normal, Into::into),
                    device_id: device_arg(input.device_id.as_deref())?,
                    submitter: input.submitter.clone(),
                    assignee_id: user_arg("assigneeId", input.assignee_id.as_deref())?,
                    tags: input.tags.clone().unwrap_or_default(),
                    due_at: time_arg("dueDate", input.due_date.as_deref())?,
                    created_by: by,
                };
                let t = tickets
                    .create_ticket(new, audit("create"))
                    .await
                    .map_err(ticket_missing)?;
                done(format!("created {}", t.reference()), t.into())
            }
            TicketAction::CreateFromAlert => {
                let alert = input.alert_id()?;
                let t = tickets
                    .create_from_alert(alert, &by, audit("create_from_alert"))
                    .await
                    .map_err(ticket_missing)?;
                let msg = format!("created {} from the alert", t.reference());
                done(msg, full_view(cx, t).await?)
            }
            TicketAction::Comment => {
                let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                let c = tickets
                    .add_comment(
                        t.id,
                        &cx.actor,
                        cx.user,
                        input.body()?,
                        input.internal.unwrap_or(false),
                        audit("comment"),
                    )
                    .await
                    .map_err(ticket_missing)?;
                Rendered::of(&TicketsOutput {
                    message: Some(format!("commented on {}", t.reference())),
                    comment: Some(c.into()),
                    ..Default::default()
                })
            }
            TicketAction::Assign => {
                let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                let to = user_arg("assigneeId", input.assignee_id.as_deref())?;
                let t = tickets
                    .assign(t.id, to, audit("assign"))
                    .await
                    .map_err(ticket_missing)?;
                let msg = match to {
                    Some(_) => format!("{} assigned", t.reference()),
                    None => format!("{} unassigned", t.reference()),
                };
                done(msg, t.into())
            }
            TicketAction::UpdateStatus => {
                let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                let to = input
                    .status
                    .ok_or_else(|| ToolError::invalid("status is required for update_status"))
                    .and_then(status_of)?;
                let t = tickets
                    .set_status(t.id, to, audit("status"))
                    .await
                    .map_err(ticket_missing)?;
                done(format!("{} is {}", t.reference(), t.status), t.into())
            }
            TicketAction::Update => {
                let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                let update = TicketUpdate {
                    subject: input.subject.clone(),
                    description: input.description.clone(),
                    category: input.category.clone(),
                    priority: input.priority.map(Into::into),
                    device_id: device_arg(input.device_id.as_deref())?,
                    submitter: input.submitter.clone(),
                    tags: input.tags.clone(),
                    due_at: time_arg("dueDate", input.due_date.as_deref())?,
                };
                let t = tickets
                    .update_ticket(t.id, update, audit("update"))
                    .await
                    .map_err(ticket_missing)?;
                done(format!("{} updated", t.reference()), t.into())
            }
            TicketAction::LinkAlert | TicketAction::UnlinkAlert => {
                let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                let alert = input.alert_id()?;
                let link = input.action == TicketAction::LinkAlert;
                if link {
                    tickets
                        .link_alert(t.id, alert, &by, audit("link_alert"))
                        .await
                } else {
                    tickets
                        .unlink_alert(t.id, alert, audit("unlink_alert"))
                        .await
                }
                .map_err(|e| match e {
                    StoreError::NotFound("linked alert") => {
                        ToolError::not_found("That alert is not linked to this ticket")
                    }
                    other => ticket_missing(other),
                })?;
                let verb = if link { "linked" } else { "unlinked" };
                let msg = format!("alert {verb} on {}", t.reference());
                done(msg, full_view(cx, t).await?)
            }
            TicketAction::AddPart => {
                let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                let description = input
                    .description
                    .as_deref()
                    .ok_or_else(|| ToolError::invalid("description is required for add_part"))?;
                let quantity = ledger::quantity_arg(input.quantity.as_deref())?;
                let price = ledger::money_arg(
                    input.unit_price.as_deref(),
                    "unitPrice",
                    ledger::currency_arg(input.currency.as_deref())?,
                )?;
                tickets
                    .add_part(
                        t.id,
                        NewPart {
                            description: description.to_owned(),
                            quantity,
                            unit_price: price,
                            billable: input.billable.unwrap_or(true),
                            created_by: by,
                        },
                        audit("add_part"),
                    )
                    .await
                    .map_err(ticket_missing)?;
                let msg = format!("part added to {}", t.reference());
                done(msg, full_view(cx, t).await?)
            }
            TicketAction::EditComment
            | TicketAction::EditAnyComment
            | TicketAction::DeleteComment
            | TicketAction::DeleteAnyComment => {
                let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                let id = input.comment_id()?;
                let scope = match input.action {
                    TicketAction::EditAnyComment | TicketAction::DeleteAnyComment => {
                        CommentScope::Any
                    }
                    _ => CommentScope::Own(cx.user),
                };
                let missing = |e: StoreError| match e {
                    StoreError::NotFound("comment") => {
                        ToolError::not_found("Comment not found or access denied")
                    }
                    other => ticket_missing(other),
                };
                let edit = matches!(
                    input.action,
                    TicketAction::EditComment | TicketAction::EditAnyComment
                );
                let c = if edit {
                    tickets
                        .edit_comment(t.id, id, scope, input.body()?, audit("edit_comment"))
                        .await
                        .map_err(missing)?
                } else {
                    tickets
                        .delete_comment(t.id, id, scope, audit("delete_comment"))
                        .await
                        .map_err(missing)?
                };
                Rendered::of(&TicketsOutput {
                    message: Some(if edit {
                        "comment edited".into()
                    } else {
                        "comment deleted".into()
                    }),
                    comment: Some(c.into()),
                    ..Default::default()
                })
            }
            TicketAction::LogTime | TicketAction::StartTimer => {
                let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                let new = input.new_time(cx)?;
                let entry = if input.action == TicketAction::LogTime {
                    let minutes = input
                        .minutes
                        .ok_or_else(|| ToolError::invalid("minutes is required for log_time"))?;
                    tickets
                        .log_time(t.id, i64::from(minutes), new, audit("log_time"))
                        .await
                } else {
                    tickets.start_timer(t.id, new, audit("start_timer")).await
                }
                .map_err(ticket_missing)?;
                Rendered::of(&TicketsOutput {
                    message: Some(format!(
                        "{} on {}",
                        if entry.ended_at.is_some() {
                            "time logged"
                        } else {
                            "timer started"
                        },
                        t.reference()
                    )),
                    time_entry: Some(entry.into()),
                    ..Default::default()
                })
            }
            TicketAction::StopTimer => {
                let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                let entry = tickets
                    .stop_timer(t.id, cx.user, audit("stop_timer"))
                    .await
                    .map_err(|e| match e {
                        StoreError::NotFound("running timer") => {
                            ToolError::not_found("You have no timer running on this ticket")
                        }
                        other => ticket_missing(other),
                    })?;
                Rendered::of(&TicketsOutput {
                    message: Some(format!(
                        "timer stopped on {}: {} min",
                        t.reference(),
                        entry.minutes.unwrap_or(0)
                    )),
                    time_entry: Some(entry.into()),
                    ..Default::default()
                })
            }
            TicketAction::Move => {
                let t = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                let to = input
                    .target_org_id
                    .as_deref()
                    .ok_or_else(|| ToolError::invalid("targetOrgId is required for move"))
                    .and_then(|o| parse_uuid("targetOrgId", o))
                    .map(OrgId)?;
                let moved = tickets
                    .move_ticket(t.id, to, cx.user, audit("move"))
                    .await
                    .map_err(|e| match e {
                        StoreError::NotFound("organization") => ToolError::not_found(
                            "Organization not found, not of this partner, or not one you \
                             manage tickets in",
                        ),
                        other => ticket_missing(other),
                    })?;
                done(
                    format!("{} moved to another organization", moved.reference()),
                    moved.into(),
                )
            }
        }
    }
}

fn status_of(s: StatusArg) -> Result<TicketStatus, ToolError> {
    Ok(match s {
        StatusArg::Active => {
            return Err(ToolError::invalid(
                "active is a list filter, not a status a ticket moves to",
            ));
        }
        StatusArg::New => TicketStatus::New,
        StatusArg::Open => TicketStatus::Open,
        StatusArg::Pending => TicketStatus::Pending,
        StatusArg::OnHold => TicketStatus::OnHold,
        StatusArg::Resolved => TicketStatus::Resolved,
        StatusArg::Closed => TicketStatus::Closed,
    })
}
