//! `manage_quotes`: proposals to a customer.
//!
//! Listing and reading quotes, drafting them (content blocks and priced lines, manual or
//! from the catalog), declining one and making a sent quote's Stripe payment link (its total;
//! a paid link marks the quote paid) are Tier 2 with `quotes.write`; sending a quote to the
//! customer is Tier 3 with `quotes.send`, as the specification says. A quote is named by
//! UUID or number (`Q-12`); another organization's is "not found".

use breeze_core::Permission;
use breeze_store::{NewQuoteLine, Quote, QuoteBlock, StoreError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    args::{time_arg, uuid_or_missing},
    ledger::{
        self, LineArg, Named, PaymentLinkView, PricedLineView, TotalsView, ledger_output,
        priced_line_view,
    },
};
use crate::reach::{self, Reach};
use crate::{Pin, Registry, Rendered, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<ManageQuotes>();
}

const QUOTE_NOT_FOUND: &str = "Quote not found or access denied";

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct BlockView {
    id: String,
    position: i64,
    kind: String,
    body: String,
}

impl From<QuoteBlock> for BlockView {
    fn from(b: QuoteBlock) -> Self {
        Self {
            id: b.id.to_string(),
            position: b.position,
            kind: b.kind,
            body: b.body,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct QuoteView {
    id: String,
    ///
    number: String,
    org_id: String,
    title: String,
    status: String,
    currency: String,
    #[serde(flatten)]
    totals: TotalsView,
    valid_until: Option<String>,
    sent_at: Option<String>,
    declined_at: Option<String>,
    decline_reason: Option<String>,
    created_by: String,
    created_at: String,
    /// The PDF, a path on this server (GET, Tier 2 with quotes.write).
    pdf_url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    blocks: Option<Vec<BlockView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lines: Option<Vec<PricedLineView>>,
    /// Its payment links, newest first: a `paid` one means the customer paid the quote.
    #[serde(skip_serializing_if = "Option::is_none")]
    payment_links: Option<Vec<PaymentLinkView>>,
}

impl From<Quote> for QuoteView {
    fn from(q: Quote) -> Self {
        Self {
            id: q.id.to_string(),
            number: q.reference(),
            org_id: q.org_id.to_string(),
            totals: TotalsView::of(q.currency, q.subtotal_minor, q.tax_minor, q.total_minor),
            title: q.title,
            status: q.status,
            currency: q.currency.to_string(),
            valid_until: q.valid_until.map(|t| t.to_rfc3339()),
            sent_at: q.sent_at.map(|t| t.to_rfc3339()),
            declined_at: q.declined_at.map(|t| t.to_rfc3339()),
            decline_reason: q.decline_reason,
            pdf_url: format!("/api/v1/orgs/{}/quotes/{}/pdf", q.org_id, q.id),
            created_by: q.created_by,
            created_at: q.created_at.to_rfc3339(),
            blocks: None,
            lines: None,
            payment_links: None,
        }
    }
}

ledger_output! {
    /// What `manage_quotes` returns; one object with the fields that apply.
    QuotesOutput { quotes, quote: QuoteView, payment_link: PaymentLinkView }
}

/// What "not found" means for each record a quote action names.
const MISSING: &[(&str, &str)] = &[
    ("quote", QUOTE_NOT_FOUND),
    ("quote line", "Quote line not found on this quote"),
    ("quote block", "Quote block not found on this quote"),
];

fn quote_missing(e: StoreError) -> ToolError {
    ledger::missing(e, MISSING)
}

async fn resolve<R: Reach>(cx: &ToolCx<'_, R>, raw: Option<&str>) -> Result<Quote, ToolError> {
    let quotes = cx.quotes();
    match ledger::named(raw, "quoteId", "Q-", QUOTE_NOT_FOUND)? {
        Named::Number(n) => quotes.quote_by_number(n).await,
        Named::Id(id) => quotes.get_quote(id).await,
    }
    .map_err(quote_missing)
}

async fn full_view<R: Reach>(cx: &ToolCx<'_, R>, q: Quote) -> Result<QuoteView, ToolError> {
    let id = q.id;
    let mut view = QuoteView::from(q);
    view.blocks = Some(ledger::views(cx.quotes().blocks(id).await?));
    view.lines = Some(
        cx.quotes()
            .lines(id)
            .await?
            .iter()
            .map(|l| priced_line_view!(l))
            .collect(),
    );
    view.payment_links = Some(ledger::views(cx.quotes().payment_links(id).await?));
    Ok(view)
}

crate::actions! {
    // Drafting, declining and payment links are Tier 2; sending to the customer is Tier 3 with
    // quotes.send.
    pub(crate) enum QuoteAction {
        List = "list" => (T2, Read, QuotesWrite),
        Get = "get" => (T2, Read, QuotesWrite),
        Create = "create" => (T2, Create, QuotesWrite),
        Update = "update" => (T2, Update, QuotesWrite),
        Delete = "delete" => (T2, Delete, QuotesWrite),
        AddBlock = "add_block" => (T2, Create, QuotesWrite),
        RemoveBlock = "remove_block" => (T2, Delete, QuotesWrite),
        AddLine = "add_line" => (T2, Create, QuotesWrite),
        RemoveLine = "remove_line" => (T2, Delete, QuotesWrite),
        Decline = "decline" => (T2, Update, QuotesWrite),
        CreatePaymentLink = "create_payment_link" => (T2, Create, QuotesWrite),
        Send = "send" => (T3, Update, QuotesSend),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BlockKindArg {
    Heading,
    Text,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct QuotesInput {
    action: QuoteAction,
    /// A UUID or a number such as Q-12.
    #[schemars(length(min = 1, max = 36))]
    quote_id: Option<String>,
    /// create, update.
    #[schemars(length(min = 1, max = 5000))]
    title: Option<String>,
    /// create: ISO 4217, e.g. USD (default: the organization's billing currency).
    #[schemars(length(min = 3, max = 3))]
    currency: Option<String>,
    /// RFC 3339.
    #[schemars(length(max = 40))]
    valid_until: Option<String>,
    /// add_block: default text.
    block_kind: Option<BlockKindArg>,
    /// add_block.
    #[schemars(length(min = 1, max = 5000))]
    body: Option<String>,
    #[schemars(length(min = 36, max = 36))]
    block_id: Option<String>,
    /// add_line: a manual line's text (or give catalogItemId).
    #[schemars(length(min = 1, max = 5000))]
    description: Option<String>,
    /// add_line: a catalog item or bundle, at this organization's price.
    #[schemars(length(min = 36, max = 36))]
    catalog_item_id: Option<String>,
    /// add_line: decimal, default "1".
    #[schemars(length(min = 1, max = 24))]
    quantity: Option<String>,
    /// add_line (manual): decimal string, e.g. "95.00".
    #[schemars(length(min = 1, max = 24))]
    unit_price: Option<String>,
    /// add_line (manual): basis points (2000 = 20 %); default 0.
    #[schemars(range(min = 0, max = 10000))]
    tax_bp: Option<u32>,
    #[schemars(length(min = 36, max = 36))]
    line_id: Option<String>,
    /// decline.
    #[schemars(length(min = 1, max = 5000))]
    reason: Option<String>,
    /// list: default 25.
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
    /// list: the last page's nextCursor.
    #[schemars(length(max = 40))]
    cursor: Option<String>,
}

impl QuotesInput {
    fn line_fields(&self) -> ledger::LineFields<'_> {
        ledger::LineFields {
            catalog_item_id: self.catalog_item_id.as_deref(),
            description: self.description.as_deref(),
            quantity: self.quantity.as_deref(),
            unit_price: self.unit_price.as_deref(),
            currency: self.currency.as_deref(),
        }
    }
}

pub(crate) struct ManageQuotes;

impl Tool for ManageQuotes {
    const NAME: &'static str = "manage_quotes";
    const TITLE: &'static str = "Manage quotes";
    const DESCRIPTION: &'static str = "Quote/proposal lifecycle (numbers like Q-12). list|get|create|update|delete (drafts)|add_block|remove_block (headings, text)|add_line (manual, or a catalog item or bundle)|remove_line|decline|create_payment_link (a Stripe payment page for a sent quote's total; a paid link marks the quote paid) Tier 2; send (to the customer; frozen after) Tier 3 with quotes.send. Amounts: decimal string + ISO 4217 currency.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::QuotesWrite;
    type Actions = QuoteAction;
    type Input = QuotesInput;
    type Output = Rendered<QuotesOutput>;
    type Reach = (reach::Quotes, reach::Tenancy, reach::Billing);

    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        let q = resolve(cx, input.quote_id.as_deref()).await?;
        if q.status != "draft" {
            return Err(ledger::conflict(format!(
                "quote {} is {}, not a draft",
                q.reference(),
                q.status
            )));
        }
        // The approver sees, and the call is pinned to, the quote as it stands.
        Ok(Some(Pin {
            summary: format!("{} {}: {}", q.reference(), q.title, q.total()),
            data: serde_json::json!({ "total": q.total(), "updatedAt": q.updated_at }),
        }))
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let quotes = cx.quotes();
        let audit = |action: &str| ledger::audit(cx, "quote", action);
        let current = || async { resolve(cx, input.quote_id.as_deref()).await };
        let (message, q) = match input.action {
            QuoteAction::List => {
                let (rows, next) = quotes
                    .list_quotes(
                        ledger::cursor::<i64>(input.cursor.as_deref())?,
                        input.limit.unwrap_or(25),
                    )
                    .await?;
                return Rendered::of(&QuotesOutput::page(ledger::views(rows), next));
            }
            QuoteAction::Get => (None, current().await?),
            QuoteAction::Create => {
                let q = quotes
                    .create_draft(
                        ledger::required(input.title.as_deref(), "title")?,
                        ledger::draft_currency(cx, input.currency.as_deref()).await?,
                        time_arg("validUntil", input.valid_until.as_deref())?,
                        &cx.actor.to_string(),
                        audit("create"),
                    )
                    .await?;
                (Some(format!("draft {} created", q.reference())), q)
            }
            QuoteAction::Update => {
                let q = current().await?;
                let q = quotes
                    .update_draft(
                        q.id,
                        input.title.as_deref(),
                        time_arg("validUntil", input.valid_until.as_deref())?,
                        audit("update"),
                    )
                    .await
                    .map_err(quote_missing)?;
                (Some("draft updated".into()), q)
            }
            QuoteAction::Delete => {
                let q = current().await?;
                quotes
                    .delete_draft(q.id, audit("delete"))
                    .await
                    .map_err(quote_missing)?;
                return Rendered::of(&QuotesOutput::said(format!(
                    "draft {} deleted",
                    q.reference()
                )));
            }
            QuoteAction::AddBlock | QuoteAction::RemoveBlock => {
                let q = current().await?;
                if input.action == QuoteAction::AddBlock {
                    let heading = input.block_kind == Some(BlockKindArg::Heading);
                    let body = ledger::required(input.body.as_deref(), "body")?;
                    quotes
                        .add_block(q.id, heading, body, audit("add_block"))
                        .await
                } else {
                    let block = uuid_or_missing(
                        input.block_id.as_deref(),
                        "blockId",
                        "Quote block not found on this quote",
                    )?;
                    quotes
                        .remove_block(q.id, block, audit("remove_block"))
                        .await
                }
                .map_err(quote_missing)?;
                (Some("blocks changed".into()), quotes.get_quote(q.id).await?)
            }
            QuoteAction::AddLine => {
                let q = current().await?;
                let line = match input.line_fields().line(q.currency)? {
                    LineArg::Catalog { item, quantity } => NewQuoteLine::Catalog { item, quantity },
                    LineArg::Manual {
                        description,
                        quantity,
                        unit_price,
                    } => NewQuoteLine::Manual {
                        description,
                        quantity,
                        unit_price,
                        tax_bp: input.tax_bp.unwrap_or(0),
                    },
                };
                let q = quotes
                    .add_line(q.id, line, audit("add_line"))
                    .await
                    .map_err(quote_missing)?;
                (Some("line added".into()), q)
            }
            QuoteAction::RemoveLine => {
                let q = current().await?;
                let line = uuid_or_missing(
                    input.line_id.as_deref(),
                    "lineId",
                    "Quote line not found on this quote",
                )?;
                let q = quotes
                    .remove_line(q.id, line, audit("remove_line"))
                    .await
                    .map_err(quote_missing)?;
                (Some("line removed".into()), q)
            }
            QuoteAction::Decline => {
                let q = current().await?;
                let reason = ledger::required(input.reason.as_deref(), "reason")?;
                let q = quotes
                    .decline(q.id, reason, audit("decline"))
                    .await
                    .map_err(quote_missing)?;
                (Some(format!("{} declined", q.reference())), q)
            }
            QuoteAction::CreatePaymentLink => {
                let q = current().await?;
                let link = cx
                    .billing()?
                    .quote_link(&q, &cx.actor.to_string(), audit("create_payment_link"))
                    .await
                    .map_err(ledger::billing_err)?;
                let q = quotes.get_quote(q.id).await?;
                return Rendered::of(&QuotesOutput {
                    message: Some(format!(
                        "payment link for {} ({}): {}",
                        q.reference(),
                        link.amount(),
                        link.url
                    )),
                    payment_link: Some(link.into()),
                    quote: Some(full_view(cx, q).await?),
                    ..Default::default()
                });
            }
            QuoteAction::Send => {
                let q = current().await?;
                let q = quotes
                    .send(q.id, audit("send"))
                    .await
                    .map_err(quote_missing)?;
                (Some(format!("{} sent to the customer", q.reference())), q)
            }
        };
        Rendered::of(&QuotesOutput::record(message, full_view(cx, q).await?))
    }
}
