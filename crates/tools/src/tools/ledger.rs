//! What the ticket and billing tools share: money in (decimal text and an ISO 4217 code) and
//! out ([`MoneyView`], [`TotalsView`], [`PricedLineView`]), records named by UUID or readable
//! number, a line given as a catalog item or typed in ([`LineArg`]), what "not found" means per
//! record kind ([`missing`]), the one-organization check of a listing's filter, listing cursors,
//! audit events named after the domain, rows turned into views, and the output every ledger
//! tool returns ([`ledger_output!`]).

use std::str::FromStr;

use breeze_core::{AuditEvent, Currency, Money, Quantity};
use breeze_store::StoreError;
use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

use super::args::uuid_or_missing;
use crate::{ErrorCode, ToolCx, ToolError, reach::Reach};

/// What a catalog item id that names nothing here answers, whichever tool was given it.
pub(crate) const CATALOG_ITEM_NOT_FOUND: &str = "Catalog item not found or access denied";

/// An amount: decimal text, minor units and currency.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MoneyView {
    amount: String,
    minor: i64,
    currency: String,
}

impl From<Money> for MoneyView {
    fn from(m: Money) -> Self {
        Self {
            amount: m.decimal(),
            minor: m.minor,
            currency: m.currency.to_string(),
        }
    }
}

/// A document's totals, in its currency.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TotalsView {
    subtotal: MoneyView,
    tax: MoneyView,
    total: MoneyView,
}

impl TotalsView {
    pub(crate) fn of(currency: Currency, subtotal: i64, tax: i64, total: i64) -> Self {
        let m = |minor| MoneyView::from(Money::new(minor, currency));
        Self {
            subtotal: m(subtotal),
            tax: m(tax),
            total: m(total),
        }
    }
}

/// A priced line as invoices and quotes show it: `quantity × unit price`, rounded once, and
/// its tax.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PricedLineView {
    id: String,
    position: i64,
    kind: String,
    description: String,
    quantity: String,
    unit_price: MoneyView,
    amount: MoneyView,
    /// Basis points: 2000 = 20 %.
    tax_bp: i64,
    tax: MoneyView,
    catalog_item_id: Option<String>,
}

/// The [`PricedLineView`] of a stored priced line (an invoice's or a quote's: the same
/// columns).
macro_rules! priced_line_view {
    ($l:expr) => {{
        let l = $l;
        let m = |minor| {
            $crate::tools::ledger::MoneyView::from(breeze_core::Money::new(minor, l.currency))
        };
        $crate::tools::ledger::PricedLineView::new(
            l.id,
            l.position,
            l.kind.to_string(),
            l.description.clone(),
            breeze_core::Quantity(l.quantity_milli),
            [m(l.unit_price_minor), m(l.amount_minor), m(l.tax_minor)],
            l.tax_bp,
            l.catalog_item_id,
        )
    }};
}
pub(crate) use priced_line_view;

impl PricedLineView {
    /// Prices are `[unit price, amount, tax]`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: Uuid,
        position: i64,
        kind: String,
        description: String,
        quantity: Quantity,
        [unit_price, amount, tax]: [MoneyView; 3],
        tax_bp: i64,
        catalog_item_id: Option<Uuid>,
    ) -> Self {
        Self {
            id: id.to_string(),
            position,
            kind,
            description,
            quantity: quantity.decimal(),
            unit_price,
            amount,
            tax_bp,
            tax,
            catalog_item_id: catalog_item_id.map(|i| i.to_string()),
        }
    }
}

/// The output of a ledger tool (invoices, contracts, quotes): one object with the fields that
/// apply — a page of records (`$many`, with `showing` and `nextCursor`), one record (`$one`,
/// with a `message` saying what a change did), or only the message — plus the tool's own
/// `$extra` fields.
macro_rules! ledger_output {
    ($(#[$meta:meta])* $name:ident { $many:ident, $one:ident: $view:ty $(, $extra:ident: $xt:ty)* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Default, serde::Serialize, schemars::JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub(crate) struct $name {
            #[serde(skip_serializing_if = "Option::is_none")]
            $many: Option<Vec<$view>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            $one: Option<$view>,
            $(
                #[serde(skip_serializing_if = "Option::is_none")]
                $extra: Option<$xt>,
            )*
            #[serde(skip_serializing_if = "Option::is_none")]
            showing: Option<usize>,
            /// Pass as `cursor` for the next page; absent on the last page.
            #[serde(skip_serializing_if = "Option::is_none")]
            next_cursor: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            message: Option<String>,
        }

        impl $name {
            /// A page of records, and the cursor of the next one.
            #[allow(dead_code)]
            fn page(views: Vec<$view>, next: Option<impl ToString>) -> Self {
                Self {
                    showing: Some(views.len()),
                    $many: Some(views),
                    next_cursor: next.map(|n| n.to_string()),
                    ..Default::default()
                }
            }

            /// One record, with what the change did (nothing for a read).
            #[allow(dead_code)]
            fn record(message: Option<String>, view: $view) -> Self {
                Self {
                    message,
                    $one: Some(view),
                    ..Default::default()
                }
            }

            /// Only what the change did (the record is gone).
            #[allow(dead_code)]
            fn said(message: impl Into<String>) -> Self {
                Self {
                    message: Some(message.into()),
                    ..Default::default()
                }
            }
        }
    };
}
pub(crate) use ledger_output;

/// A record named by its readable number (`T-1042`, `INV-000042`, `42`) or its UUID.
pub(crate) enum Named {
    Number(i64),
    Id(Uuid),
}

/// Reads `raw` (required for the action) as [`Named`] with `prefix` (`T-`, `INV-`, …); text
/// that is neither names nothing here: not found, saying `missing`.
pub(crate) fn named(
    raw: Option<&str>,
    field: &str,
    prefix: &str,
    missing: &str,
) -> Result<Named, ToolError> {
    let raw = required(raw, field)?;
    let upper = raw.to_ascii_uppercase();
    let number = upper.strip_prefix(prefix).unwrap_or(&upper);
    if let Ok(n) = number.parse::<i64>() {
        return Ok(Named::Number(n));
    }
    Uuid::parse_str(raw)
        .map(Named::Id)
        .map_err(|_| ToolError::not_found(missing))
}

/// The store's `NotFound(what)` in the caller's words: `messages` pairs each record kind the
/// tool reaches with what to say (a catalog item is common to every ledger tool); anything
/// else is the store's error as every tool words it.
pub(crate) fn missing(e: StoreError, messages: &[(&str, &str)]) -> ToolError {
    if let StoreError::NotFound(what) = &e
        && let Some((_, m)) = messages
            .iter()
            .chain(&[("catalog item", CATALOG_ITEM_NOT_FOUND)])
            .find(|(w, _)| w == what)
    {
        return ToolError::not_found(*m);
    }
    e.into()
}

/// A conflict with the record's state, in `message`.
pub(crate) fn conflict(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::Conflict, message)
}

/// A listing's organization filter: a key reaches one organization, so naming another finds
/// nothing, as with any id.
pub(crate) fn own_org<R: Reach>(cx: &ToolCx<'_, R>, org_id: Option<&str>) -> Result<(), ToolError> {
    match org_id {
        Some(org) if Uuid::parse_str(org).ok() != Some(cx.org_id().0) => Err(ToolError::not_found(
            "Organization not found or access denied",
        )),
        _ => Ok(()),
    }
}

/// A catalog item's id, required for the action (field `catalogItemId`).
pub(crate) fn catalog_item_arg(raw: Option<&str>) -> Result<Uuid, ToolError> {
    uuid_or_missing(raw, "catalogItemId", CATALOG_ITEM_NOT_FOUND)
}

/// A line to add: a catalog item at this organization's price, or one typed in.
pub(crate) enum LineArg {
    Catalog {
        item: Uuid,
        quantity: Quantity,
    },
    Manual {
        description: String,
        quantity: Quantity,
        unit_price: Money,
    },
}

/// The fields of an `add_line` action that can name a catalog item (`catalogItemId`) or
/// type a line in (`description`, `unitPrice` and optionally `currency`).
pub(crate) struct LineFields<'a> {
    pub(crate) catalog_item_id: Option<&'a str>,
    pub(crate) description: Option<&'a str>,
    pub(crate) quantity: Option<&'a str>,
    pub(crate) unit_price: Option<&'a str>,
    pub(crate) currency: Option<&'a str>,
}

impl LineFields<'_> {
    /// The line they give; a typed line is priced in `currency`, or `default` (the
    /// document's).
    pub(crate) fn line(&self, default: Currency) -> Result<LineArg, ToolError> {
        let quantity = quantity_arg(self.quantity)?;
        Ok(match self.catalog_item_id {
            Some(item) => LineArg::Catalog {
                item: catalog_item_arg(Some(item))?,
                quantity,
            },
            None => LineArg::Manual {
                description: required(self.description, "description")?.to_owned(),
                quantity,
                unit_price: money_arg(
                    self.unit_price,
                    "unitPrice",
                    currency_or(self.currency, default)?,
                )?,
            },
        })
    }
}

/// An ISO 4217 code, required.
pub(crate) fn currency_arg(raw: Option<&str>) -> Result<Currency, ToolError> {
    let code =
        raw.ok_or_else(|| ToolError::invalid("currency (ISO 4217, e.g. USD) is required"))?;
    Currency::parse(code).map_err(|e| ToolError::invalid(e.to_string()))
}

/// The currency a new draft is in: the code given, else the organization's billing currency.
pub(crate) async fn draft_currency<R: Reach>(
    cx: &ToolCx<'_, R>,
    raw: Option<&str>,
) -> Result<Currency, ToolError> {
    match raw {
        Some(c) => currency_arg(Some(c)),
        None => cx.tenancy().billing_currency().await?.ok_or_else(|| {
            ToolError::invalid(
                "currency (ISO 4217, e.g. USD) is required: the organization has no billing \
                 currency",
            )
        }),
    }
}

/// The code given, or `default` (the record's own currency).
pub(crate) fn currency_or(raw: Option<&str>, default: Currency) -> Result<Currency, ToolError> {
    raw.map_or(Ok(default), |c| currency_arg(Some(c)))
}

/// A required decimal amount in `currency`.
pub(crate) fn money_arg(
    raw: Option<&str>,
    field: &str,
    currency: Currency,
) -> Result<Money, ToolError> {
    let raw = raw.ok_or_else(|| ToolError::invalid(format!("{field} is required")))?;
    Money::parse(raw, currency).map_err(|e| ToolError::invalid(format!("{field}: {e}")))
}

/// A decimal quantity, `1` when absent.
pub(crate) fn quantity_arg(raw: Option<&str>) -> Result<Quantity, ToolError> {
    raw.map_or(Ok(Quantity::ONE), |q| {
        Quantity::parse(q).map_err(|e| ToolError::invalid(format!("quantity: {e}")))
    })
}

/// The listing cursor a previous page returned.
pub(crate) fn cursor<T: FromStr>(raw: Option<&str>) -> Result<Option<T>, ToolError> {
    raw.map(|c| {
        c.parse::<T>()
            .map_err(|_| ToolError::invalid("cursor is not one this listing returned"))
    })
    .transpose()
}

/// The audit event of `domain.action` for this call (its actor and request id).
pub(crate) fn audit<R: Reach>(cx: &ToolCx<'_, R>, domain: &str, action: &str) -> AuditEvent {
    AuditEvent::new(cx.actor.clone(), &format!("{domain}.{action}"), domain)
        .request(cx.request_id.clone())
}

/// Rows as their views.
pub(crate) fn views<T, V: From<T>>(rows: Vec<T>) -> Vec<V> {
    rows.into_iter().map(Into::into).collect()
}

/// A required argument of the action, named in the error when missing.
pub(crate) fn required<'a, T: ?Sized>(
    value: Option<&'a T>,
    field: &str,
) -> Result<&'a T, ToolError> {
    value.ok_or_else(|| ToolError::invalid(format!("{field} is required for this action")))
}

/// A billing service's failure in the caller's words: a missing account is the partner's to
/// set up (no request was made), a service's refusal or silence is upstream.
pub(crate) fn billing_err(e: breeze_billing::BillingError) -> ToolError {
    use breeze_billing::{BillingError, ProviderError};
    match e {
        BillingError::Store(StoreError::NotFound("distributor product")) => {
            ToolError::not_found("TD SYNNEX has no product with that SKU or part number")
        }
        BillingError::Store(s) => s.into(),
        BillingError::NotConfigured(m) => ToolError::new(ErrorCode::Forbidden, m)
            .hint("do not retry; an administrator sets the partner's account up (breeze billing)"),
        BillingError::NoPartner => ToolError::new(ErrorCode::Forbidden, e.to_string()),
        BillingError::Provider(ProviderError::Invalid(m)) => ToolError::invalid(m),
        BillingError::Provider(p @ ProviderError::Refused { .. }) => {
            let mut t = ToolError::new(ErrorCode::UpstreamError, p.to_string())
                .hint("do not retry unchanged; the service refused the request");
            t.retryable = false;
            t
        }
        BillingError::Provider(p) => ToolError::new(ErrorCode::UpstreamError, p.to_string()),
    }
}

/// A payment link: the provider's hosted page for an invoice's balance or a sent quote's
/// total, and its state.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PaymentLinkView {
    id: String,
    provider: String,
    url: String,
    amount: MoneyView,
    /// open, paid, superseded (a newer link replaced it) or unmatched (paid, but the invoice
    /// or quote could not take it: refund or record by hand).
    status: String,
    created_at: String,
    settled_at: Option<String>,
    payment_id: Option<String>,
}

impl From<breeze_store::PaymentLink> for PaymentLinkView {
    fn from(l: breeze_store::PaymentLink) -> Self {
        Self {
            id: l.id.to_string(),
            amount: l.amount().into(),
            provider: l.provider,
            url: l.url,
            status: l.status,
            created_at: l.created_at.to_rfc3339(),
            settled_at: l.settled_at.map(|t| t.to_rfc3339()),
            payment_id: l.payment_id.map(|p| p.to_string()),
        }
    }
}

impl From<breeze_store::QuoteLink> for PaymentLinkView {
    fn from(l: breeze_store::QuoteLink) -> Self {
        Self {
            id: l.id.to_string(),
            amount: l.amount().into(),
            provider: l.provider,
            url: l.url,
            status: l.status,
            created_at: l.created_at.to_rfc3339(),
            settled_at: l.settled_at.map(|t| t.to_rfc3339()),
            payment_id: None,
        }
    }
}
