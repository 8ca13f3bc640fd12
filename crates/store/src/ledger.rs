//! What the ticket and billing domains (tickets, invoices, the catalog, contracts, quotes)
//! share, so each is written once: reading one row or a parent's rows in the organization,
//! committing a change with its audit record, the "changed meanwhile" check of a conditional
//! write, a page cut from `limit + 1` rows, the partner's gap-free counters, and the text and
//! money checks their inputs pass.

use breeze_core::{AuditEvent, PartnerId, Timestamp, money};
use uuid::Uuid;

use crate::{
    Result, StoreError,
    alerts::check_text,
    audit,
    handles::Scoped,
    sql::{FromRows, Tx, sql},
};

/// One row of `table` of this organization by id; missing (or another organization's) is
/// `NotFound(what)`.
pub(crate) async fn one<T: FromRows>(
    s: &impl Scoped,
    table: &str,
    columns: &str,
    id: Uuid,
    what: &'static str,
) -> Result<T> {
    sql(format!(
        "SELECT {columns} FROM {table} WHERE id = $1 AND org_id = $2"
    ))
    .bind(id)
    .bind(s.org())
    .fetch_optional(s)
    .await?
    .ok_or(StoreError::NotFound(what))
}

/// The rows of `table` of this organization whose `parent` column is `id`, in `order`.
pub(crate) async fn children<T: FromRows>(
    s: &impl Scoped,
    table: &str,
    columns: &str,
    parent: &str,
    id: Uuid,
    order: &str,
) -> Result<Vec<T>> {
    sql(format!(
        "SELECT {columns} FROM {table} WHERE {parent} = $1 AND org_id = $2 ORDER BY {order}"
    ))
    .bind(id)
    .bind(s.org())
    .fetch_all(s)
    .await
}

/// Appends the change's audit record in its transaction and commits both.
pub(crate) async fn commit(mut tx: Tx, audit: &AuditEvent, now: Timestamp) -> Result<()> {
    audit::insert(&mut tx, audit, now).await?;
    tx.commit().await
}

/// A conditional write that touched no row lost a race: a conflict saying `what`.
pub(crate) fn changed(rows: u64, what: &str) -> Result<()> {
    if rows == 0 {
        return Err(StoreError::Conflict(what.to_owned()));
    }
    Ok(())
}

/// Cuts a listing fetched with `limit + 1` rows to `limit`, and names the cursor of the next
/// page (the last row's `key`) when there is one.
pub(crate) fn page<T, K>(
    mut rows: Vec<T>,
    limit: u32,
    key: impl Fn(&T) -> K,
) -> (Vec<T>, Option<K>) {
    let limit = limit as usize;
    if rows.len() > limit {
        rows.truncate(limit);
        let next = rows.last().map(key);
        (rows, next)
    } else {
        (rows, None)
    }
}

/// [`check_text`] for an optional value.
pub(crate) fn check_optional(field: &str, value: Option<&str>, max: usize) -> Result<()> {
    value.map_or(Ok(()), |v| check_text(field, v, max))
}

/// A money error is the caller's: an amount out of range or currencies mixed.
pub(crate) fn money_err(e: money::MoneyError) -> StoreError {
    StoreError::Invalid(e.to_string())
}

/// A tax rate is between 0 and 100 %.
pub(crate) fn check_tax(tax_bp: u32) -> Result<()> {
    if tax_bp > 10_000 {
        return Err(StoreError::Invalid(
            "a tax rate is between 0 and 10000 basis points (100 %)".into(),
        ));
    }
    Ok(())
}

/// The next number of `partner` from `counters` (`ticket_counters`, `invoice_counters`, …), in
/// `tx`: the counter row is created at zero if missing, then incremented and read in one
/// statement, which holds its row lock until `tx` ends. A transaction that rolls back gives
/// its number back, so numbers have no gaps; concurrent takers wait for each other, so they
/// increase in commit order.
pub(crate) async fn next_number(tx: &mut Tx, counters: &str, partner: PartnerId) -> Result<i64> {
    sql(format!(
        "INSERT INTO {counters} (partner_id, last_number) VALUES ($1, 0) \
         ON CONFLICT (partner_id) DO NOTHING"
    ))
    .bind(partner)
    .execute(&mut *tx)
    .await?;
    sql(format!(
        "UPDATE {counters} SET last_number = last_number + 1 WHERE partner_id = $1 \
         RETURNING last_number"
    ))
    .bind(partner)
    .fetch_scalar(&mut *tx)
    .await
}

/// The row of `table` of this organization with this partner-wide `number` (a ticket's,
/// an issued invoice's, a quote's).
pub(crate) async fn by_number<T: FromRows>(
    s: &impl Scoped,
    table: &str,
    columns: &str,
    number: i64,
    what: &'static str,
) -> Result<T> {
    sql(format!(
        "SELECT {columns} FROM {table} WHERE number = $1 AND org_id = $2"
    ))
    .bind(number)
    .bind(s.org())
    .fetch_optional(s)
    .await?
    .ok_or(StoreError::NotFound(what))
}
