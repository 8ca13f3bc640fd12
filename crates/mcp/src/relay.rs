//! What instances tell one another about sessions ([`Note`]s) and the ordered way out of an
//! instance ([`Outbox`]): the vocabulary shared by the session registry, which posts notes, and
//! the cluster (`crate::cluster`), which carries them over Redis. Kept apart so neither of the
//! two depends on the other for it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::jsonrpc::{ErrorObject, Id};

/// What one instance tells another.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "note", rename_all = "snake_case")]
pub(crate) enum Note {
    /// A message for the session's own stream, held by the receiver.
    Deliver { session: String, message: Value },
    /// The client's answer to a request the receiver sent.
    Answer {
        session: String,
        id: Id,
        outcome: Result<Value, ErrorObject>,
    },
    /// `notifications/cancelled` for a request running wherever it runs.
    Cancel { session: String, id: Id },
    /// The session ended: every copy ends.
    End { session: String },
    /// The session's stream is now held by `at`.
    Stream { session: String, at: String },
}

/// What the follower receives: a note, or word that notes may have been missed.
#[derive(Debug)]
pub(crate) enum Heard {
    Note(Note),
    /// The subscription was re-established; what was published meanwhile is lost.
    Resync,
}

/// A note and its addressee (`None`: every instance).
pub(crate) type Addressed = (Option<Arc<str>>, Note);

/// The ordered way out of an instance: notes are published one at a time in the order posted.
#[derive(Clone)]
pub(crate) struct Outbox(pub(crate) mpsc::UnboundedSender<Addressed>);

impl Outbox {
    /// Queues `note` for instance `to` (every instance when `None`). False once the cluster's
    /// publisher has stopped.
    pub(crate) fn post(&self, to: Option<Arc<str>>, note: Note) -> bool {
        self.0.send((to, note)).is_ok()
    }
}
