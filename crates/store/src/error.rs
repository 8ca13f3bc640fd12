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
    /// The store could not be opened as configured.
    #[error("{0}")]
    Config(String),
    /// Stored data failed to decode: a bug or a hand-edited database.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Database(sqlx::Error),
    /// The audit journal or its connection failed (see [`crate::AuditAppender`]).
    #[error("audit journal: {0}")]
    AuditJournal(String),
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
            _ => StoreError::Database(e),
        }
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
