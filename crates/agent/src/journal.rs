//! The exactly-once command journal.
//!
//! One small JSON file per recent command id in `<state dir>/journal/`. Before a command runs,
//! its "started" entry is written and fsynced; when it ends, the entry gains the result. So:
//!
//! - a second delivery of an id that is running is ignored;
//! - a second delivery of a finished id gets the stored result again, without running it;
//! - an id found started but without a result (the agent died while it ran) is never run
//!   again: it is answered with a failed result, "agent restarted while the command was
//!   running";
//! - a result stays "undelivered" until the server acknowledges storing it, and is sent again
//!   until then (on every new socket, and after a restart).
//!
//! Entries older than seven days are pruned.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use breeze_agent_proto::{CommandOutcome, CommandResult};
use breeze_core::{Clock, Timestamp};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::{create_private_dir, write_atomic};
use crate::error::AgentError;

/// How long finished entries are kept.
pub const RETENTION: chrono::Duration = chrono::Duration::days(7);

/// The error recorded for a command the agent was running when it stopped.
pub const RESTARTED_ERROR: &str = "agent restarted while the command was running";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    id: Uuid,
    started_at: Timestamp,
    #[serde(default)]
    result: Option<CommandResult>,
    #[serde(default)]
    delivered: bool,
}

/// What to do with a delivered command.
#[derive(Debug, Clone, PartialEq)]
pub enum Begin {
    /// First delivery: it is recorded as started; run it.
    Run,
    /// It is running in this process already; ignore the repeat.
    Running,
    /// It has a result already (possibly "agent restarted…"); send that again.
    Done(Box<CommandResult>),
}

/// The journal over one directory.
pub struct Journal {
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    running: Mutex<HashSet<Uuid>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// Opens (creating) the journal in `dir`.
    pub fn open(dir: &Path, clock: Arc<dyn Clock>) -> Result<Journal, AgentError> {
        create_private_dir(dir)?;
        Ok(Journal {
            dir: dir.to_path_buf(),
            clock,
            running: Mutex::new(HashSet::new()),
        })
    }

    fn path(&self, id: Uuid) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn read(&self, id: Uuid) -> Option<Result<Entry, String>> {
        let path = self.path(id);
        match std::fs::read(&path) {
            Ok(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => Some(Err(e.to_string())),
        }
    }

    fn write(&self, entry: &Entry) -> Result<(), AgentError> {
        let bytes = serde_json::to_vec(entry).map_err(|e| AgentError::Config {
            path: self.path(entry.id),
            message: e.to_string(),
        })?;
        write_atomic(&self.path(entry.id), &bytes, 0o600)
    }

    /// Decides what a delivery of `id` means, recording it as started when it is new.
    /// An error means the start could not be recorded: the command must not run.
    pub fn begin(&self, id: Uuid) -> Result<Begin, AgentError> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if running.contains(&id) {
            return Ok(Begin::Running);
        }
        match self.read(id) {
            Some(Ok(Entry {
                result: Some(result),
                ..
            })) => Ok(Begin::Done(Box::new(result))),
            Some(Ok(entry)) => Ok(Begin::Done(Box::new(
                self.interrupted(id, entry.started_at)?,
            ))),
            Some(Err(why)) => {
                tracing::warn!(command_id = %id, error = %why, "unreadable journal entry; treating the command as interrupted");
                let now = self.clock.now();
                Ok(Begin::Done(Box::new(self.interrupted(id, now)?)))
            }
            None => {
                self.write(&Entry {
                    id,
                    started_at: self.clock.now(),
                    result: None,
                    delivered: false,
                })?;
                running.insert(id);
                Ok(Begin::Run)
            }
        }
    }

    fn interrupted(&self, id: Uuid, started_at: Timestamp) -> Result<CommandResult, AgentError> {
        let result = CommandResult {
            command_id: id,
            status: CommandOutcome::Failed,
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            result: None,
            error: Some(RESTARTED_ERROR.to_owned()),
            started_at,
            finished_at: self.clock.now(),
        };
        self.write(&Entry {
            id,
            started_at,
            result: Some(result.clone()),
            delivered: false,
        })?;
        Ok(result)
    }

    /// Stores the result of a command that ran (and forgets it as running).
    pub fn finish(&self, result: &CommandResult) -> Result<(), AgentError> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.remove(&result.command_id);
        let started_at = match self.read(result.command_id) {
            Some(Ok(entry)) => entry.started_at,
            _ => result.started_at,
        };
        self.write(&Entry {
            id: result.command_id,
            started_at,
            result: Some(result.clone()),
            delivered: false,
        })
    }

    /// The stored result of `id` while the server has not acknowledged it.
    pub fn unacknowledged(&self, id: Uuid) -> Option<CommandResult> {
        match self.read(id) {
            Some(Ok(Entry {
                result: Some(result),
                delivered: false,
                ..
            })) => Some(result),
            _ => None,
        }
    }

    /// Notes that the server stored the result (its acknowledgement, or a 2xx over HTTP), so
    /// neither a new socket nor a restart sends it again.
    pub fn mark_delivered(&self, id: Uuid) {
        if let Some(Ok(mut entry)) = self.read(id)
            && entry.result.is_some()
            && !entry.delivered
        {
            entry.delivered = true;
            if let Err(e) = self.write(&entry) {
                tracing::debug!(command_id = %id, error = %e, "could not mark a result delivered");
            }
        }
    }

    /// Ids running in this process now.
    pub fn running(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect();
        ids.sort();
        ids
    }

    /// After a start: turns entries left "started" by a previous process into failed results,
    /// and returns every result the server has not confirmed, to be delivered.
    pub fn recover(&self) -> Vec<CommandResult> {
        let running = self.running();
        let mut out = Vec::new();
        for id in self.ids() {
            if running.contains(&id) {
                continue;
            }
            match self.read(id) {
                Some(Ok(Entry {
                    result: Some(result),
                    delivered: false,
                    ..
                })) => out.push(result),
                Some(Ok(Entry {
                    result: None,
                    started_at,
                    ..
                })) => match self.interrupted(id, started_at) {
                    Ok(result) => out.push(result),
                    Err(e) => {
                        tracing::warn!(command_id = %id, error = %e, "could not record an interrupted command");
                    }
                },
                _ => {}
            }
        }
        out
    }

    fn ids(&self) -> Vec<Uuid> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        dir.filter_map(Result::ok)
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".json")?
                    .parse::<Uuid>()
                    .ok()
            })
            .collect()
    }

    /// Removes finished entries started more than [`RETENTION`] ago. Returns how many.
    pub fn prune(&self) -> usize {
        let cutoff = self.clock.now() - RETENTION;
        let running = self.running();
        let mut removed = 0;
        for id in self.ids() {
            if running.contains(&id) {
                continue;
            }
            if let Some(Ok(entry)) = self.read(id)
                && entry.started_at < cutoff
                && entry.result.is_some()
                && std::fs::remove_file(self.path(id)).is_ok()
            {
                removed += 1;
            }
        }
        // Leftover temporary files from an interrupted write.
        if let Ok(dir) = std::fs::read_dir(&self.dir) {
            for entry in dir.filter_map(Result::ok) {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.') && name.ends_with(".tmp") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        removed
    }
}
