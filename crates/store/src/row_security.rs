//! PostgreSQL row-level security: the second wall behind [`crate::OrgStore`]'s `org_id` filters.
//!
//! Every table with an `org_id` column has row security enabled and forced (so the tables'
//! owner, the role Breeze connects as, is held by it too) and one policy, `org_wall`
//! (migration 0032): a row is visible and writable only when the connection's
//! `breeze.scope` setting is `system` or the row's organization id. Unset, it sees nothing.
//! The policy is stated as `org_id = <scope as a uuid> OR <scope is system>` (migration 0070)
//! so that the planner estimates it from `org_id`'s statistics: any other form it guesses
//! at 1% of the rows, and every tenant statement's plan is built for the wrong fleet.
//!
//! The store keeps two pools on PostgreSQL:
//! - the **system** pool, whose connections start with `breeze.scope=system` (a startup
//!   option, so it costs no statement): authentication, agents, sweeps and migrations — work
//!   that is not done on behalf of one organization (the audit appender's own connections
//!   start in the same scope);
//! - the **tenant** pool, used only through [`crate::OrgStore`]: its connections start with
//!   no scope, and each statement first sets the organization it runs for — in the same round
//!   trip as `BEGIN` for a transaction ([`begin_in`]), as one `SET` before a lone statement
//!   ([`acquire_in`]).
//!
//! A statement of an `OrgStore` that forgot its `org_id` filter, or named another
//! organization's id, therefore still reads and writes only its own organization's rows. The
//! wall holds only for a role that cannot bypass row security: a superuser, or a role with
//! `BYPASSRLS`, passes through every policy, which [`Store::row_security`](crate::Store::row_security)
//! reports so the server can say so at boot. SQLite has no row security; there the
//! `OrgStore` filters are the wall.

use breeze_core::OrgId;
use sqlx::{PgConnection, PgPool, Postgres, pool::PoolConnection};

use crate::Result;

/// The setting the `org_wall` policies read.
pub(crate) const SCOPE_SETTING: &str = "breeze.scope";

/// The scope of the system pool's connections.
pub(crate) const SYSTEM_SCOPE: &str = "system";

/// Whether row security holds for the role the store connects as (PostgreSQL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowSecurity {
    /// SQLite: no row security; `OrgStore`'s filters are the only wall.
    NotAvailable,
    /// The role is held by the `org_wall` policies.
    Enforced,
    /// The role passes through every policy (a superuser, or `BYPASSRLS`).
    BypassedBy {
        /// The role's name.
        role: String,
    },
}

/// `BEGIN` and the organization's scope for the transaction, one simple-protocol round trip.
/// The id is a UUID formatted here, never text from a request.
pub(crate) fn begin_in(org: OrgId) -> String {
    format!("BEGIN; SET LOCAL {SCOPE_SETTING} = '{}'", org.0)
}

/// A tenant-pool connection set to `org`'s scope for the statement about to run on it. The
/// setting outlives the statement, but every use of the tenant pool sets its own first.
pub(crate) async fn acquire_in(pool: &PgPool, org: OrgId) -> Result<PoolConnection<Postgres>> {
    let mut conn = pool.acquire().await?;
    set_scope(&mut conn, org).await?;
    Ok(conn)
}

/// Sets the connection's scope to `org`. A function of its own so that the borrow of the
/// connection is a parameter: held across an `.await` in the caller's body, rustc could not
/// prove it `Send` for every lifetime.
async fn set_scope(conn: &mut PgConnection, org: OrgId) -> Result<()> {
    sqlx::query("SELECT set_config('breeze.scope', $1, false)")
        .bind(org.0.to_string())
        .execute(conn)
        .await?;
    Ok(())
}

/// Whether `role` bypasses row security on the database `pool` is connected to.
pub(crate) async fn check(pool: &PgPool) -> Result<RowSecurity> {
    let (role, bypasses): (String, bool) = sqlx::query_as(
        "SELECT rolname::text, rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user",
    )
    .fetch_one(pool)
    .await?;
    Ok(if bypasses {
        RowSecurity::BypassedBy { role }
    } else {
        RowSecurity::Enforced
    })
}
