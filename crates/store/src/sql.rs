//! One query path for two databases.
//!
//! Every statement is written once, with `$1`-style placeholders that both SQLite and
//! PostgreSQL accept, and its arguments are [`Arg`]s that encode themselves for either
//! backend. [`Sql`] runs against a [`Target`]: the pool, or an open [`Tx`]. Only this module
//! matches on the backend.
//!
//! Stored text never holds U+0000: PostgreSQL refuses it in TEXT ("invalid byte sequence") and
//! as `\u0000` in JSONB, while SQLite would keep it. So that both backends store the same and
//! a NUL in a request cannot make its audit record or a result unstorable, every text and JSON
//! argument has each U+0000 replaced by U+FFFD ([`without_nul`], [`json_without_nul`]); the
//! audit appender applies the same to the rows it encodes itself. Bytes are stored as given.

use std::borrow::Cow;

use breeze_core::{
    AiSessionId, ApiKeyId, AuditId, DeviceGroupId, DeviceId, GrantId, OrgId, PartnerId, RoleId,
    SessionId, SiteId, Timestamp, UserId,
};
use serde_json::{Value, value::RawValue};
use sqlx::{
    Database, Encode, PgConnection, PgPool, Postgres, Sqlite, SqliteConnection, SqlitePool, Type,
    encode::IsNull,
    error::BoxDynError,
    postgres::{PgRow, PgTypeInfo},
    sqlite::{SqliteRow, SqliteTypeInfo},
    types::Json,
};
use uuid::Uuid;

use crate::{Pool, Result, StoreError};

/// A bound value. Each variant holds an `Option` so a typed NULL can be bound.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Bool(Option<bool>),
    I64(Option<i64>),
    F64(Option<f64>),
    Text(Option<String>),
    Bytes(Option<Vec<u8>>),
    Uuid(Option<Uuid>),
    Ts(Option<Timestamp>),
    /// JSON text, serialized once from the caller's value (a JSON column on SQLite, JSONB on
    /// PostgreSQL).
    Json(Option<Json<Box<RawValue>>>),
}

impl Arg {
    /// A value serialized to JSON (lists of scopes, permissions, tags; details), any U+0000 in
    /// its strings stored as U+FFFD.
    pub(crate) fn json(value: &impl serde::Serialize) -> Self {
        Arg::Json(Some(json_value(value)))
    }
}

/// `value` serialized to JSON, any U+0000 in its strings as U+FFFD (PostgreSQL's JSONB refuses
/// it), ready to bind to a JSON column.
pub(crate) fn json_value(value: &impl serde::Serialize) -> Json<Box<RawValue>> {
    // Serializing our own plain data types cannot fail; keep a null rather than panic.
    let raw = serde_json::value::to_raw_value(value).unwrap_or_default();
    Json(match json_without_nul(raw.get()) {
        Cow::Borrowed(_) => raw,
        // The replacement keeps the text valid JSON; should it not parse, store a null.
        Cow::Owned(text) => RawValue::from_string(text).unwrap_or_default(),
    })
}

/// `s` with each U+0000 replaced by U+FFFD; allocates only when there is one.
pub(crate) fn without_nul(s: &str) -> Cow<'_, str> {
    if s.as_bytes().contains(&0) {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// [`without_nul`] for an owned string.
fn owned_without_nul(s: String) -> String {
    match without_nul(&s) {
        Cow::Borrowed(_) => s,
        Cow::Owned(replaced) => replaced,
    }
}

/// JSON text `s` with each `\u0000` escape (U+0000 in a string or key) replaced by `\ufffd`;
/// allocates only when there is one. A `\\u0000` (an escaped backslash, then `u0000`) is left
/// alone: the scan steps over every escape whole.
pub(crate) fn json_without_nul(s: &str) -> Cow<'_, str> {
    const NUL: &[u8] = b"\\u0000";
    // Most JSON holds no backslash at all: one memchr decides, before any substring search.
    if !s.as_bytes().contains(&b'\\') || !s.contains("\\u0000") {
        return Cow::Borrowed(s);
    }
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len() + 8);
    let (mut copied, mut i) = (0, 0);
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
        } else if bytes[i..].starts_with(NUL) {
            out.push_str(&s[copied..i]);
            out.push_str("\\ufffd");
            i += NUL.len();
            copied = i;
        } else {
            // An escape: the character after the backslash is ASCII in valid JSON.
            i += 2;
        }
    }
    out.push_str(&s[copied.min(s.len())..]);
    Cow::Owned(out)
}

macro_rules! arg_from {
    ($($ty:ty => $variant:ident $(via $conv:expr)?),+ $(,)?) => {$(
        impl From<$ty> for Arg {
            fn from(v: $ty) -> Self { Arg::$variant(Some(arg_from!(@conv v $(, $conv)?))) }
        }
        impl From<Option<$ty>> for Arg {
            fn from(v: Option<$ty>) -> Self { Arg::$variant(v.map(|v| arg_from!(@conv v $(, $conv)?))) }
        }
    )+};
    (@conv $v:ident) => { $v };
    (@conv $v:ident, $conv:expr) => { ($conv)($v) };
}

arg_from! {
    bool => Bool,
    i64 => I64,
    f64 => F64,
    String => Text via owned_without_nul,
    &str => Text via |v: &str| without_nul(v).into_owned(),
    &String => Text via |v: &String| without_nul(v).into_owned(),
    Vec<u8> => Bytes,
    &[u8] => Bytes via <[u8]>::to_vec,
    Uuid => Uuid,
    Timestamp => Ts,
    AiSessionId => Uuid via |v: AiSessionId| v.0,
    ApiKeyId => Uuid via |v: ApiKeyId| v.0,
    GrantId => Uuid via |v: GrantId| v.0,
    AuditId => Uuid via |v: AuditId| v.0,
    DeviceGroupId => Uuid via |v: DeviceGroupId| v.0,
    DeviceId => Uuid via |v: DeviceId| v.0,
    OrgId => Uuid via |v: OrgId| v.0,
    PartnerId => Uuid via |v: PartnerId| v.0,
    RoleId => Uuid via |v: RoleId| v.0,
    SessionId => Uuid via |v: SessionId| v.0,
    SiteId => Uuid via |v: SiteId| v.0,
    UserId => Uuid via |v: UserId| v.0,
}

/// Encodes an [`Arg`] by delegating to the wrapped type's encoding for backend `$db`.
macro_rules! encode_arg {
    ($db:ty, $info:ty) => {
        impl Type<$db> for Arg {
            fn type_info() -> $info {
                <String as Type<$db>>::type_info()
            }
            fn compatible(_: &$info) -> bool {
                true
            }
        }

        impl<'q> Encode<'q, $db> for Arg {
            // By value: the text and bytes move into the statement's arguments (the default
            // would clone them through `encode_by_ref`).
            fn encode(
                self,
                buf: &mut <$db as Database>::ArgumentBuffer<'q>,
            ) -> Result<IsNull, BoxDynError> {
                match self {
                    Arg::Bool(v) => Encode::<$db>::encode(v, buf),
                    Arg::I64(v) => Encode::<$db>::encode(v, buf),
                    Arg::F64(v) => Encode::<$db>::encode(v, buf),
                    Arg::Text(v) => Encode::<$db>::encode(v, buf),
                    Arg::Bytes(v) => Encode::<$db>::encode(v, buf),
                    Arg::Uuid(v) => Encode::<$db>::encode(v, buf),
                    Arg::Ts(v) => Encode::<$db>::encode(v, buf),
                    Arg::Json(v) => Encode::<$db>::encode(v, buf),
                }
            }

            fn encode_by_ref(
                &self,
                buf: &mut <$db as Database>::ArgumentBuffer<'q>,
            ) -> Result<IsNull, BoxDynError> {
                match self {
                    Arg::Bool(v) => Encode::<$db>::encode_by_ref(v, buf),
                    Arg::I64(v) => Encode::<$db>::encode_by_ref(v, buf),
                    Arg::F64(v) => Encode::<$db>::encode_by_ref(v, buf),
                    Arg::Text(v) => Encode::<$db>::encode_by_ref(v, buf),
                    Arg::Bytes(v) => Encode::<$db>::encode_by_ref(v, buf),
                    Arg::Uuid(v) => Encode::<$db>::encode_by_ref(v, buf),
                    Arg::Ts(v) => Encode::<$db>::encode_by_ref(v, buf),
                    Arg::Json(v) => Encode::<$db>::encode_by_ref(v, buf),
                }
            }

            fn produces(&self) -> Option<$info> {
                Some(match self {
                    Arg::Bool(_) => <bool as Type<$db>>::type_info(),
                    Arg::I64(_) => <i64 as Type<$db>>::type_info(),
                    Arg::F64(_) => <f64 as Type<$db>>::type_info(),
                    Arg::Text(_) => <String as Type<$db>>::type_info(),
                    Arg::Bytes(_) => <Vec<u8> as Type<$db>>::type_info(),
                    Arg::Uuid(_) => <Uuid as Type<$db>>::type_info(),
                    Arg::Ts(_) => <Timestamp as Type<$db>>::type_info(),
                    Arg::Json(_) => <Json<Value> as Type<$db>>::type_info(),
                })
            }
        }
    };
}
encode_arg!(Sqlite, SqliteTypeInfo);
encode_arg!(Postgres, PgTypeInfo);

/// A row type both backends can decode.
pub(crate) trait FromRows:
    for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin
{
}
impl<T> FromRows for T where
    T: for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin
{
}

/// Where a statement runs.
pub(crate) enum Target<'a> {
    /// A pool or connection, used as it is.
    Direct(Direct<'a>),
    /// PostgreSQL's tenant pool, for one organization: the statement runs on a connection
    /// whose row-security scope was set to it (see [`crate::row_security`]).
    PgOrg(&'a PgPool, OrgId),
    /// A pool of a database known to be down (see [`crate::health`]): the statement fails at
    /// once with this error rather than wait out the pool's acquire timeout.
    Down(sqlx::Error),
}

/// An executor a statement runs on as it is.
pub(crate) enum Direct<'a> {
    SqlitePool(&'a SqlitePool),
    PgPool(&'a PgPool),
    SqliteConn(&'a mut SqliteConnection),
    PgConn(&'a mut PgConnection),
}

impl<'a> From<&'a Pool> for Target<'a> {
    fn from(pool: &'a Pool) -> Self {
        Target::Direct(match pool {
            Pool::Sqlite(p) => Direct::SqlitePool(p),
            Pool::Postgres { system, .. } => Direct::PgPool(system),
        })
    }
}

impl<'a> From<&'a crate::Store> for Target<'a> {
    fn from(store: &'a crate::Store) -> Self {
        match store.health.refusal() {
            Some(down) => Target::Down(down),
            None => Target::from(&store.pool),
        }
    }
}

/// Reads across organizations: on PostgreSQL in the `system` scope, which sees every one.
impl<'a> From<&'a crate::CrossOrg<'_>> for Target<'a> {
    fn from(cross: &'a crate::CrossOrg<'_>) -> Self {
        Target::from(cross.store)
    }
}

/// An organization's statements: on PostgreSQL they run in its row-security scope, so a
/// statement that forgot its `org_id` filter still sees only that organization's rows.
impl<'a, S: crate::handles::Scoped> From<&'a S> for Target<'a> {
    fn from(org: &'a S) -> Self {
        if let Some(down) = org.store().health.refusal() {
            return Target::Down(down);
        }
        match &org.store().pool {
            Pool::Sqlite(p) => Target::Direct(Direct::SqlitePool(p)),
            Pool::Postgres { tenant, .. } => Target::PgOrg(tenant, org.org()),
        }
    }
}

impl<'a> From<&'a mut Tx> for Target<'a> {
    fn from(tx: &'a mut Tx) -> Self {
        Target::Direct(match tx {
            Tx::Sqlite(t) => Direct::SqliteConn(t),
            Tx::Postgres(t) => Direct::PgConn(t),
        })
    }
}

/// An open transaction; dropped without [`Tx::commit`] it rolls back.
pub(crate) enum Tx {
    Sqlite(sqlx::Transaction<'static, Sqlite>),
    Postgres(sqlx::Transaction<'static, Postgres>),
}

impl Tx {
    /// Begins a transaction. On SQLite it takes the write lock at once (`BEGIN IMMEDIATE`),
    /// waiting for it as any statement does: a deferred transaction that reads and then writes
    /// fails with `SQLITE_BUSY` at its first write, without waiting, when another connection
    /// committed after its read — which a busy demo (an agent's heartbeats beside a tool call)
    /// hit within seconds of starting.
    pub(crate) async fn begin(pool: &Pool) -> Result<Tx> {
        Ok(match pool {
            Pool::Sqlite(p) => Tx::Sqlite(p.begin_with("BEGIN IMMEDIATE").await?),
            Pool::Postgres { system, .. } => Tx::Postgres(system.begin().await?),
        })
    }

    /// Begins a transaction of `org`'s: on PostgreSQL on the tenant pool, in the organization's
    /// row-security scope (set in the same round trip as `BEGIN`).
    pub(crate) async fn begin_in(org: &impl crate::handles::Scoped) -> Result<Tx> {
        if let Some(down) = org.store().health.refusal() {
            return Err(down.into());
        }
        Ok(match &org.store().pool {
            Pool::Sqlite(p) => Tx::Sqlite(p.begin_with("BEGIN IMMEDIATE").await?),
            Pool::Postgres { tenant, .. } => Tx::Postgres(
                tenant
                    .begin_with(crate::row_security::begin_in(org.org()))
                    .await?,
            ),
        })
    }

    pub(crate) async fn commit(self) -> Result<()> {
        match self {
            Tx::Sqlite(t) => t.commit().await?,
            Tx::Postgres(t) => t.commit().await?,
        }
        Ok(())
    }
}

/// A statement and its arguments.
#[must_use = "a statement does nothing until it is run"]
pub(crate) struct Sql {
    text: String,
    args: Vec<Arg>,
}

/// Starts a statement.
pub(crate) fn sql(text: impl Into<String>) -> Sql {
    Sql {
        text: text.into(),
        args: Vec::new(),
    }
}

/// The statement as SQLite should see it. There `$n` placeholders are named parameters, and
/// binding resolves each name by a linear scan — quadratic in the number of parameters, which
/// shows on multi-row inserts. When the statement uses `$1`, `$2`, … each once and in order
/// (outside quoted literals), anonymous `?` placeholders mean the same and bind in constant
/// time; any other statement is left as written.
fn sqlite_text(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut next, mut copied, mut i, mut quoted) = (1u64, 0, 0, false);
    while i < bytes.len() {
        match bytes[i] {
            b'\'' => quoted = !quoted,
            b'$' if !quoted => {
                let digits = bytes[i + 1..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                if digits > 0 {
                    let end = i + 1 + digits;
                    if text[i + 1..end].parse::<u64>().ok() != Some(next) {
                        return Cow::Borrowed(text);
                    }
                    next += 1;
                    out.push_str(&text[copied..i]);
                    out.push('?');
                    copied = end;
                    i = end;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    if next == 1 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Runs `$body` with `$q` bound to the statement built for the executor's backend and `$e`
/// to the executor.
macro_rules! on_backend {
    ($self:ident, $direct:expr, $build:ident, |$q:ident, $e:ident| $body:expr) => {{
        let Sql { text, args } = $self;
        match $direct {
            Direct::SqlitePool($e) => {
                let text = sqlite_text(&text);
                let $q = args.into_iter().fold(sqlx::$build(&text), |q, a| q.bind(a));
                $body
            }
            Direct::PgPool($e) => {
                let $q = args.into_iter().fold(sqlx::$build(&text), |q, a| q.bind(a));
                $body
            }
            Direct::SqliteConn($e) => {
                let text = sqlite_text(&text);
                let $q = args.into_iter().fold(sqlx::$build(&text), |q, a| q.bind(a));
                $body
            }
            Direct::PgConn($e) => {
                let $q = args.into_iter().fold(sqlx::$build(&text), |q, a| q.bind(a));
                $body
            }
        }
    }};
}

/// Runs the statement on `$target` through `$on`, which runs it on a [`Direct`] executor: an
/// organization's statement on PostgreSQL first takes a tenant connection in its scope.
macro_rules! on_target {
    ($self:ident, $target:ident, $on:ident) => {{
        match $target.into() {
            Target::Direct(direct) => $self.$on(direct).await,
            Target::PgOrg(pool, org) => {
                let mut conn = crate::row_security::acquire_in(pool, org).await?;
                $self.$on(Direct::PgConn(&mut conn)).await
            }
            Target::Down(down) => Err(down.into()),
        }
    }};
}

impl Sql {
    /// Appends an argument; the statement refers to it as `$n`, counting from 1.
    pub(crate) fn bind(mut self, arg: impl Into<Arg>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// The statement with `prefix` before it (`EXPLAIN …`).
    #[cfg(feature = "testing")]
    fn prefixed(mut self, prefix: &str) -> Self {
        self.text.insert_str(0, prefix);
        self
    }

    /// The statement's plan, one line per step: SQLite's `EXPLAIN QUERY PLAN`, PostgreSQL's
    /// `EXPLAIN` with sequential scans discouraged, as a large table would. What a test reads
    /// to hold a statement to an index.
    #[cfg(feature = "testing")]
    pub(crate) async fn explain(self, org: &impl crate::handles::Scoped) -> Result<String> {
        let lines: Vec<String> = match org.store().backend() {
            crate::Backend::Sqlite => {
                let rows: Vec<(i64, i64, i64, String)> =
                    self.prefixed("EXPLAIN QUERY PLAN ").fetch_all(org).await?;
                rows.into_iter().map(|r| r.3).collect()
            }
            crate::Backend::Postgres => {
                let mut tx = Tx::begin_in(org).await?;
                sql("SET LOCAL enable_seqscan = off")
                    .execute(&mut tx)
                    .await?;
                let rows: Vec<(String,)> = self.prefixed("EXPLAIN ").fetch_all(&mut tx).await?;
                rows.into_iter().map(|r| r.0).collect()
            }
        };
        Ok(lines.join("\n"))
    }

    /// Appends SQL text (for filters assembled at run time).
    pub(crate) fn push(&mut self, text: &str) {
        self.text.push_str(text);
    }

    /// Appends an argument and returns its placeholder, e.g. `$3`.
    pub(crate) fn arg(&mut self, arg: impl Into<Arg>) -> String {
        self.args.push(arg.into());
        format!("${}", self.args.len())
    }

    /// Appends the keyset condition that resumes a listing ordered by `(time, id)` after (or,
    /// `descending`, before) the row `(t, id)`. The redundant bound on `time` alone is what
    /// lets both databases start the index range (`(org_id, time, id)`) at the cursor instead
    /// of reading every earlier row again for each page (the `OR` alone is not a range); the
    /// caller leaves out any other bound on `time` in that direction, which SQLite could pick
    /// as the range's start instead.
    pub(crate) fn push_keyset(
        &mut self,
        time: &str,
        t: Timestamp,
        id_column: &str,
        id: impl Into<Arg>,
        descending: bool,
    ) {
        let (t, id) = (self.arg(t), self.arg(id));
        let (bound, strict) = if descending { ("<=", "<") } else { (">=", ">") };
        self.push(&format!(
            " AND {time} {bound} {t} AND ({time} {strict} {t} OR {id_column} {strict} {id})"
        ));
    }

    /// Appends `(` the placeholders of `args` `)`, for a row of a multi-row `VALUES` list.
    pub(crate) fn push_row<const N: usize>(&mut self, args: [Arg; N]) {
        use std::fmt::Write as _;
        self.text.push('(');
        for (i, arg) in args.into_iter().enumerate() {
            self.args.push(arg);
            let sep = if i == 0 { "" } else { ", " };
            // Writing to a String cannot fail.
            let _ = write!(self.text, "{sep}${}", self.args.len());
        }
        self.text.push(')');
    }

    /// Runs the statement; returns the number of rows it affected.
    pub(crate) async fn execute<'a>(self, target: impl Into<Target<'a>>) -> Result<u64> {
        on_target!(self, target, execute_on)
    }

    async fn execute_on(self, direct: Direct<'_>) -> Result<u64> {
        on_backend!(self, direct, query, |q, e| Ok(q
            .execute(e)
            .await
            .map_err(StoreError::from)?
            .rows_affected()))
    }

    /// Runs a query and decodes every row.
    pub(crate) async fn fetch_all<'a, T: FromRows>(
        self,
        target: impl Into<Target<'a>>,
    ) -> Result<Vec<T>> {
        on_target!(self, target, fetch_all_on)
    }

    async fn fetch_all_on<T: FromRows>(self, direct: Direct<'_>) -> Result<Vec<T>> {
        on_backend!(self, direct, query, |q, e| {
            q.try_map(|row| T::from_row(&row))
                .fetch_all(e)
                .await
                .map_err(StoreError::from)
        })
    }

    /// Runs a query and decodes the first row, if any.
    pub(crate) async fn fetch_optional<'a, T: FromRows>(
        self,
        target: impl Into<Target<'a>>,
    ) -> Result<Option<T>> {
        on_target!(self, target, fetch_optional_on)
    }

    async fn fetch_optional_on<T: FromRows>(self, direct: Direct<'_>) -> Result<Option<T>> {
        on_backend!(self, direct, query, |q, e| {
            q.try_map(|row| T::from_row(&row))
                .fetch_optional(e)
                .await
                .map_err(StoreError::from)
        })
    }

    /// Runs a query whose single row and column is a scalar.
    pub(crate) async fn fetch_scalar<'a, T>(self, target: impl Into<Target<'a>>) -> Result<T>
    where
        T: for<'r> sqlx::Decode<'r, Sqlite> + Type<Sqlite>,
        T: for<'r> sqlx::Decode<'r, Postgres> + Type<Postgres>,
        T: Send + Unpin,
    {
        on_target!(self, target, fetch_scalar_on)
    }

    async fn fetch_scalar_on<T>(self, direct: Direct<'_>) -> Result<T>
    where
        T: for<'r> sqlx::Decode<'r, Sqlite> + Type<Sqlite>,
        T: for<'r> sqlx::Decode<'r, Postgres> + Type<Postgres>,
        T: Send + Unpin,
    {
        on_backend!(self, direct, query_scalar, |q, e| q
            .fetch_one(e)
            .await
            .map_err(StoreError::from))
    }
}

/// Escapes `\\`, `%` and `_` for a `LIKE … ESCAPE '\\'` pattern.
pub(crate) fn escape_like(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::{json_without_nul, sqlite_text, without_nul};

    #[test]
    fn nul_becomes_the_replacement_character() {
        assert!(matches!(without_nul("plain"), Cow::Borrowed("plain")));
        assert_eq!(without_nul("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
        let json = serde_json::json!({ "k\0": ["x\0y", "\\u0000", "\\\0"] }).to_string();
        let cleaned = json_without_nul(&json);
        let back: serde_json::Value = serde_json::from_str(&cleaned).expect("still JSON");
        // A literal backslash followed by `u0000` is text, not a NUL, and stays.
        assert_eq!(
            back,
            serde_json::json!({ "k\u{FFFD}": ["x\u{FFFD}y", "\\u0000", "\\\u{FFFD}"] })
        );
        let text = "{\"a\":\"\\\\u0000\"}";
        assert_eq!(json_without_nul(text), text);
        assert!(matches!(json_without_nul("{\"a\":1}"), Cow::Borrowed(_)));
    }

    #[test]
    fn sequential_placeholders_become_anonymous_on_sqlite() {
        assert_eq!(
            sqlite_text("INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4)"),
            "INSERT INTO t (a, b) VALUES (?, ?), (?, ?)"
        );
        // Quoted text is not a placeholder; `$` without digits is not either.
        assert_eq!(
            sqlite_text("SELECT json_extract(x, '$.a$1') FROM t WHERE a = $1 AND b LIKE $2"),
            "SELECT json_extract(x, '$.a$1') FROM t WHERE a = ? AND b LIKE ?"
        );
    }

    #[test]
    fn other_statements_are_left_as_written() {
        for text in [
            "SELECT 1",
            "UPDATE t SET a = $2 WHERE id = $1",
            "SELECT * FROM t WHERE a = $1 OR b = $1",
            "SELECT * FROM t WHERE a = $1 AND b = $3",
        ] {
            assert_eq!(sqlite_text(text), text);
        }
    }
}
