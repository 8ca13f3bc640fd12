//! `list_invoices`, `get_invoice` and `manage_invoices`: invoices with their lines and
//! payments.
//!
//! The reads are Tier 2 on purpose (financial data needs `ai:write`, as the specification
//! says) and need `invoices.read`. Drafts, their lines and assembling a draft from a ticket's
//! billable time and parts are Tier 2 with `invoices.write`; issuing, voiding, and recording or
//! voiding a payment are Tier 3 with `invoices.send`. Amounts are decimal strings with an
//! ISO 4217 currency in, and `{amount, minor, currency}` out; no floating point anywhere.

use breeze_core::{InvoiceStatus, Money, Permission};
use breeze_store::{Invoice, InvoiceLine, NewLine, Payment, StoreError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{
    args::{time_arg, uuid_or_missing},
    ledger::{
        self, MoneyView, Named, PaymentLinkView, PricedLineView, TotalsView, currency_arg,
        currency_or, ledger_output, priced_line_view,
    },
    tickets::resolve_ticket,
};
use crate::reach::{self, Reach};
use crate::{NoActions, Pin, Registry, Rendered, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<GetInvoice>();
    r.register::<ListInvoices>();
    r.register::<ManageInvoices>();
}

const INVOICE_NOT_FOUND: &str = "Invoice not found or access denied";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum InvoiceStatusArg {
    Draft,
    Issued,
    Paid,
    Void,
}

impl From<InvoiceStatusArg> for InvoiceStatus {
    fn from(s: InvoiceStatusArg) -> Self {
        match s {
            InvoiceStatusArg::Draft => InvoiceStatus::Draft,
            InvoiceStatusArg::Issued => InvoiceStatus::Issued,
            InvoiceStatusArg::Paid => InvoiceStatus::Paid,
            InvoiceStatusArg::Void => InvoiceStatus::Void,
        }
    }
}

/// An invoice line: a priced line and what it bills.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct LineView {
    #[serde(flatten)]
    line: PricedLineView,
    time_entry_id: Option<String>,
    part_id: Option<String>,
    contract_id: Option<String>,
}

impl From<InvoiceLine> for LineView {
    fn from(l: InvoiceLine) -> Self {
        Self {
            line: priced_line_view!(&l),
            time_entry_id: l.time_entry_id.map(|i| i.to_string()),
            part_id: l.part_id.map(|i| i.to_string()),
            contract_id: l.contract_id.map(|i| i.to_string()),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct PaymentView {
    id: String,
    amount: MoneyView,
    method: String,
    reference: Option<String>,
    received_at: String,
    recorded_by: String,
    voided_at: Option<String>,
    void_reason: Option<String>,
}

impl From<Payment> for PaymentView {
    fn from(p: Payment) -> Self {
        Self {
            id: p.id.to_string(),
            amount: Money::new(p.amount_minor, p.currency).into(),
            method: p.method,
            reference: p.reference,
            received_at: p.received_at.to_rfc3339(),
            recorded_by: p.recorded_by,
            voided_at: p.voided_at.map(|t| t.to_rfc3339()),
            void_reason: p.void_reason,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct InvoiceView {
    id: String,
    /// INV-000042 once issued; absent on a draft.
    number: Option<String>,
    org_id: String,
    status: String,
    currency: String,
    #[serde(flatten)]
    totals: TotalsView,
    paid: MoneyView,
    balance: MoneyView,
    notes: Option<String>,
    due_date: Option<String>,
    ticket_id: Option<String>,
    issued_at: Option<String>,
    voided_at: Option<String>,
    void_reason: Option<String>,
    created_by: String,
    created_at: String,
    /// The PDF, a path on this server (GET, Tier 2 as reading the invoice is).
    pdf_url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    lines: Option<Vec<LineView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payments: Option<Vec<PaymentView>>,
    /// Payment links made for it, newest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    payment_links: Option<Vec<PaymentLinkView>>,
}

impl From<Invoice> for InvoiceView {
    fn from(i: Invoice) -> Self {
        Self {
            id: i.id.to_string(),
            number: i.reference(),
            org_id: i.org_id.to_string(),
            status: i.status.to_string(),
            currency: i.currency.to_string(),
            totals: TotalsView::of(i.currency, i.subtotal_minor, i.tax_minor, i.total_minor),
            paid: Money::new(i.paid_minor, i.currency).into(),
            balance: i.balance().into(),
            notes: i.notes,
            due_date: i.due_at.map(|t| t.to_rfc3339()),
            ticket_id: i.ticket_id.map(|t| t.to_string()),
            issued_at: i.issued_at.map(|t| t.to_rfc3339()),
            voided_at: i.voided_at.map(|t| t.to_rfc3339()),
            void_reason: i.void_reason,
            created_by: i.created_by,
            created_at: i.created_at.to_rfc3339(),
            pdf_url: format!("/api/v1/orgs/{}/invoices/{}/pdf", i.org_id, i.id),
            lines: None,
            payments: None,
            payment_links: None,
        }
    }
}

ledger_output! {
    /// What each invoice tool returns; one object with the fields that apply.
    InvoicesOutput {
        invoices,
        invoice: InvoiceView,
        payment: PaymentView,
        payment_link: PaymentLinkView,
    }
}

/// What "not found" means for each record an invoice action names.
const MISSING: &[(&str, &str)] = &[
    ("invoice", INVOICE_NOT_FOUND),
    ("ticket", "Ticket not found or access denied"),
    ("invoice line", "Invoice line not found on this draft"),
    ("payment", "Payment not found on this invoice"),
    ("contract", "Contract not found or access denied"),
];

fn invoice_missing(e: StoreError) -> ToolError {
    ledger::missing(e, MISSING)
}

/// An invoice named by UUID or by number (`INV-000042`, `42`).
async fn resolve_invoice<R: Reach>(
    cx: &ToolCx<'_, R>,
    raw: Option<&str>,
) -> Result<Invoice, ToolError> {
    let invoices = cx.invoices();
    match ledger::named(raw, "invoiceId", "INV-", INVOICE_NOT_FOUND)? {
        Named::Number(n) => invoices.invoice_by_number(n).await,
        Named::Id(id) => invoices.get_invoice(id).await,
    }
    .map_err(invoice_missing)
}

async fn full_view<R: Reach>(cx: &ToolCx<'_, R>, i: Invoice) -> Result<InvoiceView, ToolError> {
    let id = i.id;
    let mut view = InvoiceView::from(i);
    view.lines = Some(ledger::views(cx.invoices().lines(id).await?));
    view.payments = Some(ledger::views(cx.invoices().payments(id).await?));
    view.payment_links = Some(ledger::views(cx.invoices().payment_links(id).await?));
    Ok(view)
}

// ---- list_invoices ---------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ListInput {
    /// Only this organization's (it must be the key's).
    #[schemars(length(min = 36, max = 36))]
    org_id: Option<String>,
    status: Option<InvoiceStatusArg>,
    /// default 25.
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
    /// The last page's nextCursor.
    #[schemars(length(max = 40))]
    cursor: Option<String>,
}

pub(crate) struct ListInvoices;

impl Tool for ListInvoices {
    const NAME: &'static str = "list_invoices";
    const TITLE: &'static str = "List invoices";
    const DESCRIPTION: &'static str = "Invoices newest first, with optional organization and status (draft, issued, paid, void) filters. Tier 2: financial data.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::InvoicesRead;
    type Actions = NoActions;
    type Input = ListInput;
    type Output = Rendered<InvoicesOutput>;
    type Reach = reach::Invoices;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        ledger::own_org(cx, input.org_id.as_deref())?;
        let page = cx
            .invoices()
            .list_invoices(
                input.status.map(Into::into),
                ledger::cursor::<Uuid>(input.cursor.as_deref())?,
                input.limit.unwrap_or(25),
            )
            .await?;
        Rendered::of(&InvoicesOutput::page(
            ledger::views(page.invoices),
            page.next_before,
        ))
    }
}

// ---- get_invoice -----------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GetInput {
    /// A UUID or a number such as INV-000042.
    #[schemars(length(min = 1, max = 36))]
    invoice_id: String,
}

pub(crate) struct GetInvoice;

impl Tool for GetInvoice {
    const NAME: &'static str = "get_invoice";
    const TITLE: &'static str = "Get an invoice";
    const DESCRIPTION: &'static str = "One invoice with every line and payment: amounts in minor units and as decimals, with currency. Tier 2: financial data.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::InvoicesRead;
    type Actions = NoActions;
    type Input = GetInput;
    type Output = Rendered<InvoicesOutput>;
    type Reach = reach::Invoices;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let inv = resolve_invoice(cx, Some(&input.invoice_id)).await?;
        Rendered::of(&InvoicesOutput::record(None, full_view(cx, inv).await?))
    }
}

// ---- manage_invoices -------------------------------------------------------------------------

crate::actions! {
    // Drafts and lines are Tier 2; financial finalization is Tier 3 with invoices.send.
    pub(crate) enum InvoiceAction {
        Create = "create" => (T2, Create, InvoicesWrite),
        Update = "update" => (T2, Update, InvoicesWrite),
        Delete = "delete" => (T2, Delete, InvoicesWrite),
        AddLine = "add_line" => (T2, Create, InvoicesWrite),
        RemoveLine = "remove_line" => (T2, Delete, InvoicesWrite),
        AddCatalogLine = "add_catalog_line" => (T2, Create, InvoicesWrite),
        AssembleFromTicket = "assemble_from_ticket" => (T2, Create, InvoicesWrite),
        AssembleFromPeriod = "assemble_from_period" => (T2, Create, InvoicesWrite),
        AddContractLines = "add_contract_lines" => (T2, Create, InvoicesWrite),
        CreatePaymentLink = "create_payment_link" => (T2, Create, InvoicesWrite),
        Issue = "issue" => (T3, Update, InvoicesSend),
        Void = "void" => (T3, Update, InvoicesSend),
        RecordPayment = "record_payment" => (T3, Create, InvoicesSend),
        VoidPayment = "void_payment" => (T3, Update, InvoicesSend),
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ManageInput {
    action: InvoiceAction,
    /// A UUID or a number such as INV-000042.
    #[schemars(length(min = 1, max = 36))]
    invoice_id: Option<String>,
    /// create (default: the organization's billing currency), assemble_from_period, and every
    /// amount's: ISO 4217, e.g. USD.
    #[schemars(length(min = 3, max = 3))]
    currency: Option<String>,
    #[schemars(length(min = 1, max = 2000))]
    notes: Option<String>,
    /// RFC 3339.
    #[schemars(length(max = 40))]
    due_date: Option<String>,
    /// add_line.
    #[schemars(length(min = 1, max = 2000))]
    description: Option<String>,
    /// add_line, add_catalog_line: decimal, default "1".
    #[schemars(length(min = 1, max = 24))]
    quantity: Option<String>,
    /// add_line: decimal string, e.g. "95.00".
    #[schemars(length(min = 1, max = 24))]
    unit_price: Option<String>,
    /// add_line, assemble_from_ticket, assemble_from_period: basis points (2000 = 20 %);
    /// default 0.
    #[schemars(range(min = 0, max = 10000))]
    tax_bp: Option<u32>,
    #[schemars(length(min = 36, max = 36))]
    line_id: Option<String>,
    /// add_catalog_line: a catalog item or bundle, billed at this organization's price.
    #[schemars(length(min = 36, max = 36))]
    catalog_item_id: Option<String>,
    /// assemble_from_ticket: a UUID or T-1042.
    #[schemars(length(min = 1, max = 36))]
    ticket_id: Option<String>,
    /// assemble_from_period: RFC 3339, inclusive.
    #[schemars(length(max = 40))]
    period_start: Option<String>,
    /// assemble_from_period: RFC 3339, exclusive.
    #[schemars(length(max = 40))]
    period_end: Option<String>,
    /// add_contract_lines: the contract whose lines to add.
    #[schemars(length(min = 36, max = 36))]
    contract_id: Option<String>,
    /// record_payment: decimal string in the invoice's currency.
    #[schemars(length(min = 1, max = 24))]
    amount: Option<String>,
    /// record_payment, e.g. bank_transfer, card, cash.
    #[schemars(length(min = 1, max = 50))]
    method: Option<String>,
    #[schemars(length(min = 1, max = 2000))]
    reference: Option<String>,
    #[schemars(length(min = 36, max = 36))]
    payment_id: Option<String>,
    /// void, void_payment.
    #[schemars(length(min = 1, max = 2000))]
    reason: Option<String>,
}

impl ManageInput {
    fn reason(&self) -> Result<&str, ToolError> {
        self.reason
            .as_deref()
            .ok_or_else(|| ToolError::invalid("reason is required for this action"))
    }
}

pub(crate) struct ManageInvoices;

impl Tool for ManageInvoices {
    const NAME: &'static str = "manage_invoices";
    const TITLE: &'static str = "Manage invoices";
    const DESCRIPTION: &'static str = "Invoice lifecycle. create|update|delete (drafts)|add_line|add_catalog_line (a catalog item or bundle at this organization's price)|remove_line|assemble_from_ticket (the ticket's billable time × rate + parts)|assemble_from_period (every ticket's billable time and parts in [periodStart, periodEnd), in currency)|add_contract_lines (a contract's lines)|create_payment_link (a Stripe payment page for an issued invoice's balance; a paid link records its payment) Tier 2; issue (takes the next gap-free number; immutable after)|void (keeps its number)|record_payment|void_payment Tier 3 with invoices.send. Amounts: decimal string + ISO 4217 currency.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::InvoicesWrite;
    type Actions = InvoiceAction;
    type Input = ManageInput;
    type Output = Rendered<InvoicesOutput>;
    type Reach = (
        reach::Invoices,
        reach::Tickets,
        reach::Billing,
        reach::Tenancy,
    );

    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        let inv = resolve_invoice(cx, input.invoice_id.as_deref()).await?;
        let expected = match input.action {
            InvoiceAction::Issue => InvoiceStatus::Draft,
            InvoiceAction::Void | InvoiceAction::RecordPayment => InvoiceStatus::Issued,
            _ => inv.status,
        };
        if inv.status != expected {
            return Err(ledger::conflict(format!(
                "the invoice is {}, not {expected}",
                inv.status
            )));
        }
        // The approver sees, and the call is pinned to, the amounts as they stand.
        Ok(Some(Pin {
            summary: format!(
                "{} {}: {}",
                inv.reference().unwrap_or_else(|| "draft".into()),
                inv.status,
                inv.total()
            ),
            data: serde_json::json!({
                "status": inv.status, "total": inv.total(), "paid": inv.paid_minor,
                "updatedAt": inv.updated_at,
            }),
        }))
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let invoices = cx.invoices();
        let audit = |action: &str| ledger::audit(cx, "invoice", action);
        let by = cx.actor.to_string();
        let inv_id = || async { resolve_invoice(cx, input.invoice_id.as_deref()).await };
        let (message, invoice) = match input.action {
            InvoiceAction::Create => {
                let inv = invoices
                    .create_draft(
                        ledger::draft_currency(cx, input.currency.as_deref()).await?,
                        input.notes.as_deref(),
                        time_arg("dueDate", input.due_date.as_deref())?,
                        &by,
                        audit("create"),
                    )
                    .await?;
                ("draft created".to_owned(), inv)
            }
            InvoiceAction::Update => {
                let id = inv_id().await?.id;
                let inv = invoices
                    .update_draft(
                        id,
                        input.notes.as_deref(),
                        time_arg("dueDate", input.due_date.as_deref())?,
                        audit("update"),
                    )
                    .await
                    .map_err(invoice_missing)?;
                ("draft updated".to_owned(), inv)
            }
            InvoiceAction::Delete => {
                let id = inv_id().await?.id;
                invoices
                    .delete_draft(id, audit("delete"))
                    .await
                    .map_err(invoice_missing)?;
                return Rendered::of(&InvoicesOutput::said("draft deleted"));
            }
            InvoiceAction::AddLine => {
                let current = inv_id().await?;
                let description = input
                    .description
                    .clone()
                    .ok_or_else(|| ToolError::invalid("description is required for add_line"))?;
                let quantity = ledger::quantity_arg(input.quantity.as_deref())?;
                let price = ledger::money_arg(
                    input.unit_price.as_deref(),
                    "unitPrice",
                    currency_or(input.currency.as_deref(), current.currency)?,
                )?;
                let line = NewLine {
                    description,
                    quantity,
                    unit_price: price,
                    tax_bp: input.tax_bp.unwrap_or(0),
                };
                let inv = invoices
                    .add_line(current.id, line, audit("add_line"))
                    .await
                    .map_err(invoice_missing)?;
                ("line added".to_owned(), inv)
            }
            InvoiceAction::AddCatalogLine => {
                let id = inv_id().await?.id;
                let item = ledger::catalog_item_arg(input.catalog_item_id.as_deref())?;
                let quantity = ledger::quantity_arg(input.quantity.as_deref())?;
                let inv = invoices
                    .add_catalog_line(id, item, quantity, audit("add_catalog_line"))
                    .await
                    .map_err(invoice_missing)?;
                ("catalog line added".to_owned(), inv)
            }
            InvoiceAction::RemoveLine => {
                let id = inv_id().await?.id;
                let line = uuid_or_missing(
                    input.line_id.as_deref(),
                    "lineId",
                    "Invoice line not found on this draft",
                )?;
                let inv = invoices
                    .remove_line(id, line, audit("remove_line"))
                    .await
                    .map_err(invoice_missing)?;
                ("line removed".to_owned(), inv)
            }
            InvoiceAction::AssembleFromTicket => {
                let ticket = resolve_ticket(cx, input.ticket_id.as_deref()).await?;
                let inv = invoices
                    .assemble_from_ticket(
                        ticket.id,
                        input.tax_bp.unwrap_or(0),
                        &by,
                        audit("assemble"),
                    )
                    .await
                    .map_err(invoice_missing)?;
                (format!("draft assembled from {}", ticket.reference()), inv)
            }
            InvoiceAction::AssembleFromPeriod => {
                let start = time_arg("periodStart", input.period_start.as_deref())?
                    .ok_or_else(|| ToolError::invalid("periodStart is required for this action"))?;
                let end = time_arg("periodEnd", input.period_end.as_deref())?
                    .ok_or_else(|| ToolError::invalid("periodEnd is required for this action"))?;
                let currency = match input.currency.as_deref() {
                    Some(c) => Some(currency_arg(Some(c))?),
                    None => cx.tenancy().billing_currency().await?,
                };
                let inv = invoices
                    .assemble_from_period(
                        start,
                        end,
                        currency,
                        input.tax_bp.unwrap_or(0),
                        &by,
                        audit("assemble"),
                    )
                    .await
                    .map_err(invoice_missing)?;
                (
                    format!(
                        "draft assembled from {} to {}",
                        start.to_rfc3339(),
                        end.to_rfc3339()
                    ),
                    inv,
                )
            }
            InvoiceAction::AddContractLines => {
                let id = inv_id().await?.id;
                let contract = uuid_or_missing(
                    input.contract_id.as_deref(),
                    "contractId",
                    "Contract not found or access denied",
                )?;
                let inv = invoices
                    .add_contract_lines(id, contract, audit("add_contract_lines"))
                    .await
                    .map_err(invoice_missing)?;
                ("contract lines added".to_owned(), inv)
            }
            InvoiceAction::CreatePaymentLink => {
                let current = inv_id().await?;
                let link = cx
                    .billing()?
                    .invoice_link(&current, &by, audit("create_payment_link"))
                    .await
                    .map_err(ledger::billing_err)?;
                let inv = invoices.get_invoice(current.id).await?;
                return Rendered::of(&InvoicesOutput {
                    message: Some(format!(
                        "payment link for {} ({}): {}",
                        inv.reference().unwrap_or_default(),
                        link.amount(),
                        link.url
                    )),
                    payment_link: Some(link.into()),
                    invoice: Some(full_view(cx, inv).await?),
                    ..Default::default()
                });
            }
            InvoiceAction::Issue => {
                let id = inv_id().await?.id;
                let inv = invoices
                    .issue(id, audit("issue"))
                    .await
                    .map_err(invoice_missing)?;
                (
                    format!("issued as {}", inv.reference().unwrap_or_default()),
                    inv,
                )
            }
            InvoiceAction::Void => {
                let id = inv_id().await?.id;
                let inv = invoices
                    .void(id, input.reason()?, audit("void"))
                    .await
                    .map_err(invoice_missing)?;
                (
                    format!("{} voided", inv.reference().unwrap_or_default()),
                    inv,
                )
            }
            InvoiceAction::RecordPayment | InvoiceAction::VoidPayment => {
                let current = inv_id().await?;
                let payment = if input.action == InvoiceAction::RecordPayment {
                    let amount = ledger::money_arg(
                        input.amount.as_deref(),
                        "amount",
                        currency_or(input.currency.as_deref(), current.currency)?,
                    )?;
                    let method = input.method.as_deref().unwrap_or("other");
                    invoices
                        .record_payment(
                            current.id,
                            amount,
                            method,
                            input.reference.as_deref(),
                            &by,
                            audit("record_payment"),
                        )
                        .await
                } else {
                    let payment = uuid_or_missing(
                        input.payment_id.as_deref(),
                        "paymentId",
                        "Payment not found on this invoice",
                    )?;
                    invoices
                        .void_payment(current.id, payment, input.reason()?, audit("void_payment"))
                        .await
                }
                .map_err(invoice_missing)?;
                let inv = invoices.get_invoice(current.id).await?;
                return Rendered::of(&InvoicesOutput {
                    message: Some(format!(
                        "payment {}; invoice is {}",
                        if payment.voided_at.is_some() {
                            "voided"
                        } else {
                            "recorded"
                        },
                        inv.status
                    )),
                    payment: Some(payment.into()),
                    invoice: Some(full_view(cx, inv).await?),
                    ..Default::default()
                });
            }
        };
        Rendered::of(&InvoicesOutput::record(
            Some(message),
            full_view(cx, invoice).await?,
        ))
    }
}
