//! The error type of the state store.

use std::path::PathBuf;

use super::Condition;
use crate::aws::SdkFailure;

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
    /// Another process holds the pipeline's lease in a shared store (DynamoDB), and it did not
    /// expire while we waited.
    #[error(
        "pipeline writer lease unavailable: pipeline '{pipeline}' is being written by {holder} (lease in {store}, expires in {expires_in_ms} ms by the holder's clock); waited {waited_ms} ms"
    )]
    LeaseHeld {
        /// The pipeline.
        pipeline: String,
        /// Where the lease lives, e.g. `DynamoDB table 'skippr-state'`.
        store: String,
        /// The holder's id (host, process id, random suffix).
        holder: String,
        /// How long until the lease expires, by the holder's clock as we read it (negative:
        /// expired, but not for long enough to be sure the holder is gone).
        expires_in_ms: i64,
        /// How long we waited.
        waited_ms: u64,
    },
    /// A DynamoDB call failed after the SDK's own retries.
    #[error("DynamoDB table '{table}': {op} of {key} failed: {failure}")]
    Aws {
        /// The table.
        table: String,
        /// The item (or the table, for table-level calls).
        key: String,
        /// The operation, e.g. `GetItem`, `TransactWriteItems`.
        op: &'static str,
        /// What the SDK reported, and whether a later attempt may succeed (boxed: it is large).
        failure: Box<SdkFailure>,
    },
    /// The AWS configuration for the DynamoDB store could not be loaded (no region, ...).
    #[error("DynamoDB state store: {0}")]
    AwsSetup(#[source] crate::aws::AwsError),
    /// The store's DynamoDB table does not exist. It is never created implicitly.
    #[error(
        "DynamoDB table '{table}' (region {region}) does not exist: create it with `skipprd store create` (or with your infrastructure: partition key `pk` (S), sort key `sk` (S)), then run again"
    )]
    TableMissing {
        /// The table.
        table: String,
        /// The region asked.
        region: String,
    },
    /// The store's DynamoDB table exists but cannot be used (wrong key schema, being deleted,
    /// still being created).
    #[error("DynamoDB table '{table}' cannot be used as a state store: {message}")]
    TableUnusable {
        /// The table.
        table: String,
        /// What is wrong.
        message: String,
        /// Whether it may become usable by itself (a table still being created).
        retryable: bool,
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
    /// The store's file is damaged: redb cannot read it (it is not a redb database, or its
    /// pages are corrupt). Never repaired in place.
    #[error(
        "state store {path} is damaged and cannot be read ({message}). Move it aside (for example `mv {path} {path}.damaged`) and run again: for a pipeline's `state.redb` that is safe, as the next sync takes the source position from the pipeline's WAL (each batch records the position it reached) and skips the batches a destination table has already landed (docs/wal.md)"
    )]
    Damaged {
        /// The store's file.
        path: PathBuf,
        /// What redb reported.
        message: String,
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
            StateError::Conflict { .. }
            | StateError::LeaseUnavailable { .. }
            | StateError::LeaseHeld { .. } => true,
            StateError::Storage { retryable, .. } | StateError::TableUnusable { retryable, .. } => {
                *retryable
            }
            StateError::Aws { failure, .. } => failure.retryable,
            StateError::Fenced { .. }
            | StateError::Corrupt { .. }
            | StateError::Damaged { .. }
            | StateError::TableMissing { .. }
            | StateError::AwsSetup(_) => false,
        }
    }
}
