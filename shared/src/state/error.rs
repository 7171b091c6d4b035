//! The error type of the state store.

use std::path::PathBuf;

use super::Condition;

/// Why a state operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A conditional write found the item in another state (someone else wrote it).
    #[error("state item {key} changed: expected {expected:?}, found version {found:?}")]
    Conflict {
        /// The item.
        key: String,
        /// The condition that failed.
        expected: Condition,
        /// The item's version, if it exists.
        found: Option<u64>,
    },
    /// A fenced write came from a writer whose lease was taken over.
    #[error(
        "write to {key} refused: the writer's lease (token {token}) was taken over (lease now at {current:?})"
    )]
    Fenced {
        /// The item.
        key: String,
        /// The writer's fencing token.
        token: u64,
        /// The lease's current version.
        current: Option<u64>,
    },
    /// Another process holds the pipeline's writer lease.
    #[error(
        "pipeline writer lease unavailable: pipeline '{pipeline}' is being written by another process (lock {path}); waited {waited_ms} ms"
    )]
    LeaseUnavailable {
        /// The pipeline.
        pipeline: String,
        /// The lock file.
        path: PathBuf,
        /// How long we waited.
        waited_ms: u64,
    },
    /// The store's file could not be opened, read or written.
    #[error("state store {path}: {message}")]
    Storage {
        /// The store's file.
        path: PathBuf,
        /// The underlying error.
        message: String,
        /// Whether the same operation may succeed later.
        retryable: bool,
    },
    /// A stored item could not be decoded.
    #[error("state item {key} is corrupt: {message}")]
    Corrupt {
        /// The item.
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl StateError {
    /// Whether retrying (after re-reading, for a conflict) may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            StateError::Conflict { .. } | StateError::LeaseUnavailable { .. } => true,
            StateError::Storage { retryable, .. } => *retryable,
            StateError::Fenced { .. } | StateError::Corrupt { .. } => false,
        }
    }
}
