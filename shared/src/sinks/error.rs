//! Errors of the destinations.

use std::path::PathBuf;

use crate::wal::{BatchId, WalError};

/// What went wrong delivering to a destination.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The sink's settings cannot work (found before any I/O).
    #[error("data sink `{sink}`: {message}")]
    Config {
        /// The sink's name in `data_sinks`.
        sink: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// An Iceberg operation on a table failed.
    #[error("Iceberg table `{table}`: {source}")]
    Iceberg {
        /// The table (`namespace.table`).
        table: String,
        /// The cause.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// The table's schema cannot hold the pipeline's data.
    #[error(
        "Iceberg table `{table}`: column `{column}` has type {table_type} in the table but the data needs {data_type}, and Iceberg cannot change one into the other (was the table changed outside skipprd?)"
    )]
    IncompatibleColumn {
        /// The table.
        table: String,
        /// Dotted path of the column.
        column: String,
        /// The column's type in the table.
        table_type: String,
        /// The type the data needs.
        data_type: String,
    },
    /// A WAL batch could not be read for delivery.
    #[error("reading WAL batch {batch} for delivery: {source}")]
    Wal {
        /// The batch.
        batch: BatchId,
        /// The cause.
        #[source]
        source: WalError,
    },
    /// A WAL batch's rows could not be shaped to the table's schema.
    #[error("Iceberg table `{table}`: WAL batch {batch} does not fit the table schema: {source}")]
    Align {
        /// The table.
        table: String,
        /// The batch.
        batch: BatchId,
        /// The cause.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// A file of the destination could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The AWS configuration of the sink could not be loaded (no region, ...).
    #[error("data sink `{sink}`: {source}")]
    Aws {
        /// The sink's name in `data_sinks`.
        sink: String,
        /// The cause.
        #[source]
        source: crate::aws::AwsError,
    },
    /// A deadletter object could not be written, listed, read or moved (in a directory or
    /// an S3 bucket).
    #[error(transparent)]
    Object(#[from] crate::objects::ObjectError),
    /// An object of the destination in S3 could not be written or read.
    #[error("cannot {op} `{uri}`: {failure}")]
    ObjectStore {
        /// What was being done: `write`, `read`, `list` or `delete`.
        op: &'static str,
        /// The object (or prefix), `s3://bucket/key`.
        uri: String,
        /// The SDK's error, classified (retryable on throttling, 5xx and transport errors).
        failure: Box<crate::aws::SdkFailure>,
    },
    /// The deadletter sink cannot be opened (its AWS configuration could not be loaded, ...).
    #[error("deadletter sink `{sink}`: {message}")]
    DeadletterConfig {
        /// The sink's name in `deadletter_sinks`.
        sink: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The writer's lease was lost (taken over by another writer) before a table commit:
    /// nothing was published to that table.
    #[error("table {table}: not committed: {source}")]
    LeaseLost {
        /// The table.
        table: String,
        /// The state store's answer (usually `Fenced`).
        #[source]
        source: Box<crate::state::StateError>,
    },
    /// The catalog store of the sink (the DynamoDB table of a `SkipprLake` on S3) cannot be
    /// used.
    #[error("data sink `{sink}`: catalog store: {source}")]
    Catalog {
        /// The sink's name in `data_sinks`.
        sink: String,
        /// The cause (boxed: it is large).
        #[source]
        source: Box<crate::state::StateError>,
    },
    /// A failpoint fired (tests only).
    #[error("failpoint `{name}` fired")]
    Failpoint {
        /// The failpoint.
        name: &'static str,
    },
}

impl SinkError {
    /// Whether trying again later may succeed (the batches stay in the WAL either way).
    pub fn is_retryable(&self) -> bool {
        match self {
            SinkError::Config { .. }
            | SinkError::IncompatibleColumn { .. }
            | SinkError::Aws { .. }
            | SinkError::DeadletterConfig { .. } => false,
            SinkError::ObjectStore { failure, .. } => failure.retryable,
            SinkError::Object(source) => source.is_retryable(),
            SinkError::Iceberg { source, .. } => {
                source.retryable()
                    || matches!(
                        source.kind(),
                        iceberg::ErrorKind::Unexpected | iceberg::ErrorKind::CatalogCommitConflicts
                    )
            }
            SinkError::Wal { source, .. } => source.is_retryable(),
            SinkError::Align { .. } => false,
            SinkError::Catalog { source, .. } | SinkError::LeaseLost { source, .. } => {
                source.is_retryable()
            }
            SinkError::Io { .. } | SinkError::Failpoint { .. } => true,
        }
    }
}
