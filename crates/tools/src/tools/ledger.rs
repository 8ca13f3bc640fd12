//! What the ticket and billing tools share: money in (decimal text and an ISO 4217 code) and
//! out ([`MoneyView`]), records named by UUID or readable number, listing cursors, audit
//! events named after the domain, and rows turned into views.

use std::str::FromStr;

use breeze_core::{AuditEvent, Currency, Money, Quantity};
use schemars::JsonSchema;
use serde::Serialize;
use uuid::Uuid;

use crate::{ToolCx, ToolError, reach::Reach};

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

/// A record named by its readable number (`T-1042`, `INV-000042`, `42`) or its UUID.
pub(crate) enum Named {
    Number(i64),
    Id(Uuid),
}

/// Reads `raw` (required for the action) as [`Named`] with `prefix` (`T-`, `INV-`, …); text
/// that is neither is `None`, which callers report as the record not found.
pub(crate) fn named(
    raw: Option<&str>,
    field: &str,
    prefix: &str,
) -> Result<Option<Named>, ToolError> {
    let raw =
        raw.ok_or_else(|| ToolError::invalid(format!("{field} is required for this action")))?;
    let upper = raw.to_ascii_uppercase();
    let number = upper.strip_prefix(prefix).unwrap_or(&upper);
    if let Ok(n) = number.parse::<i64>() {
        return Ok(Some(Named::Number(n)));
    }
    Ok(Uuid::parse_str(raw).ok().map(Named::Id))
}

/// An ISO 4217 code, required.
pub(crate) fn currency_arg(raw: Option<&str>) -> Result<Currency, ToolError> {
    let code =
        raw.ok_or_else(|| ToolError::invalid("currency (ISO 4217, e.g. USD) is required"))?;
    Currency::parse(code).map_err(|e| ToolError::invalid(e.to_string()))
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
