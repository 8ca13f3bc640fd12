//! The library's error type.

use std::path::PathBuf;

/// Everything that can go wrong in the agent library.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A file could not be read or written.
    #[error("{action} {path}: {error}")]
    Io {
        action: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    /// The config file is not valid.
    #[error("config file {path} is invalid: {message}")]
    Config { path: PathBuf, message: String },
    /// The server answered with an error body `{"error":{"code","message"}}`.
    #[error("server refused ({status}, {code}): {message}")]
    Server {
        status: u16,
        code: String,
        message: String,
    },
    /// The server could not be reached or answered something unreadable.
    #[error("cannot reach the server: {0}")]
    Transport(String),
    /// The token was refused (401).
    #[error("the server refused the device token (401): {0}")]
    Unauthorized(String),
    /// The token is refused for good: the running agent stopped (exit status
    /// [`crate::EXIT_TOKEN_REFUSED`]).
    #[error(
        "the server refuses this device's token ({0}): the device was re-enrolled, or its token \
         revoked or rotated away; enroll again (with --reenroll-token from an administrator to \
         stay the same device)"
    )]
    TokenRefused(String),
    /// A URL could not be built.
    #[error("invalid server URL {0:?}: it must start with http:// or https://")]
    BadUrl(String),
}

impl AgentError {
    /// An IO error with the action and path it happened on.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        AgentError::Io {
            action,
            path: path.into(),
            error: source,
        }
    }
}
