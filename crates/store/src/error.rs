//! The store's error type.

/// What can go wrong talking to the database.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row does not exist, or belongs to another organization (indistinguishable on purpose).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// A uniqueness rule was broken; the message names what is taken.
    #[error("{0}")]
    Conflict(String),
    /// The request makes no sense for the data (e.g. a site of another organization).
    #[error("{0}")]
    Invalid(String),
    /// The row is visible to the caller but belongs to someone else in a way the data itself
    /// decides (another user's ticket comment).
    #[error("{0}")]
    Forbidden(String),
    /// The store could not be opened as configured.
    #[error("{0}")]
    Config(String),
    /// Stored data failed to decode: a bug or a hand-edited database.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The database cannot take the request now: a lock held past the lock timeout, a
    /// statement past the statement timeout, a read-only or full database, a lost connection
    /// or an exhausted pool. Worth retrying shortly.
    #[error("database unavailable: {0}")]
    Unavailable(sqlx::Error),
    #[error(transparent)]
    Database(sqlx::Error),
    /// The audit journal or its connection failed (see [`crate::AuditAppender`]).
    #[error("audit journal: {0}")]
    AuditJournal(String),
    /// An audit archive could not be written or read (see [`crate::Store::purge_audit`]).
    #[error("audit archive: {0}")]
    Archive(String),
    /// A checkpoint of SQLite's write-ahead log failed (see [`crate::Store::checkpoint`]).
    #[error("checkpoint failed: {0}")]
    Checkpoint(String),
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                StoreError::Conflict(db.message().to_owned())
            }
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(e.to_string())
            }
            _ if is_unavailable(&e) => StoreError::Unavailable(e),
            _ => StoreError::Database(e),
        }
    }
}

/// Whether `e` says the database cannot take requests now, rather than that this one is wrong.
fn is_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let Some(code) = db.code() else {
                return false;
            };
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                // The primary result code is the extended one's low byte: BUSY, LOCKED,
                // READONLY, IOERR, FULL, CANTOPEN.
                code.parse::<i32>()
                    .is_ok_and(|c| matches!(c & 0xff, 5 | 6 | 8 | 10 | 13 | 14))
            } else {
                // SQLSTATE: lock_not_available, query_canceled (statement_timeout),
                // read_only_sql_transaction, idle-in-transaction timeout, serialization failure,
                // deadlock, operator intervention (shutdown), connection exceptions, insufficient
                // resources.
                matches!(
                    code.as_ref(),
                    "55P03" | "57014" | "25006" | "25P03" | "40001" | "40P01"
                ) || code.starts_with("57P")
                    || code.starts_with("08")
                    || code.starts_with("53")
            }
        }
        _ => false,
    }
}

impl StoreError {
    /// Whether retrying later may succeed: the database was unavailable (see
    /// [`StoreError::Unavailable`]).
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

impl StoreError {
    /// Replaces a raw uniqueness message with one that names the taken value.
    pub(crate) fn conflict_as(self, message: impl FnOnce() -> String) -> Self {
        match self {
            StoreError::Conflict(_) => StoreError::Conflict(message()),
            other => other,
        }
    }
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
