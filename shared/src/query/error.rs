//! [`QueryError`]: why a query could not run.

use datafusion::error::DataFusionError;

use crate::wal::WalError;

/// Why [`QueryEngine`](super::QueryEngine) could not open a WAL or run a statement. Every
/// message is one line, except DataFusion's own, which is shown as DataFusion wrote it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// A pipeline's WAL could not be read.
    #[error("pipeline '{pipeline}': {source}")]
    Wal {
        /// The pipeline.
        pipeline: String,
        /// What went wrong.
        #[source]
        source: WalError,
    },
    /// A WAL batch could not be read while a statement scanned it.
    #[error("pipeline '{pipeline}': {message}")]
    Scan {
        /// The pipeline.
        pipeline: String,
        /// The WAL's error message.
        message: String,
        /// Whether the WAL error was retryable, or the batch's segment was deleted by a reclaim
        /// since the WAL was read (refresh, then run the statement again).
        retryable: bool,
    },
    /// The statement names a table that does not exist.
    #[error("table '{table}' not found; {}", known_tables(.known))]
    TableNotFound {
        /// The table as the statement named it (without the default catalog).
        table: String,
        /// The tables that do exist, `pipeline.namespace`, sorted.
        known: Vec<String>,
    },
    /// The statement is not valid SQL, names an unknown column or function, or failed while it
    /// ran. The message is DataFusion's.
    #[error("{0}")]
    Sql(DataFusionError),
    /// A pipeline keeps its WAL somewhere this engine cannot read.
    #[error("pipeline '{pipeline}': {reason}")]
    Unsupported {
        /// The pipeline.
        pipeline: String,
        /// Why.
        reason: String,
    },
    /// The AWS configuration a pipeline's S3 WAL needs could not be loaded (no region, ...).
    #[error("pipeline '{pipeline}': {message}")]
    Aws {
        /// The pipeline.
        pipeline: String,
        /// What went wrong.
        message: String,
    },
    /// The landed files of a pipeline's `File` or `S3` destination (their listing, a table's
    /// marker, a file's Parquet footer) could not be read.
    #[error("pipeline '{pipeline}': reading its landed files: {message}")]
    Landed {
        /// The pipeline.
        pipeline: String,
        /// What could not be read (the file's path or `s3://` location) and why.
        message: String,
        /// Whether reading again may succeed (a network or S3 failure, an object replaced
        /// while it was read), not a file that is not valid Parquet.
        retryable: bool,
    },
    /// A landed Iceberg table of a pipeline could not be listed or loaded.
    #[error("pipeline '{pipeline}': reading its Iceberg tables: {source}")]
    Lake {
        /// The pipeline.
        pipeline: String,
        /// The cause.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// The runtime that runs queries could not be started.
    #[error("could not start the query runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A management statement this build does not have (see [`super::manage`]).
    #[error(
        "`{statement}` is not supported: the management statements are SHOW PIPELINES, SHOW STATS [pipeline], SCHEMA DUMP [pipeline] and RESET PIPELINE <pipeline>"
    )]
    NotSupported {
        /// The statement as typed.
        statement: String,
    },
    /// A management statement names a pipeline that is not among those queried.
    #[error("pipeline '{pipeline}' is not one of the pipelines queried ({})", .known.join(", "))]
    UnknownPipeline {
        /// The name as typed.
        pipeline: String,
        /// The pipelines queried.
        known: Vec<String>,
    },
    /// A management statement failed while it ran (`RESET PIPELINE`, `SCHEMA DUMP`).
    #[error("{message}")]
    Management {
        /// The error, one line.
        message: String,
        /// Whether it is a usage error (exit 2: not confirmed, a bad config).
        config: bool,
        /// Whether running it again unchanged might succeed.
        retryable: bool,
    },
    /// A statement run through Athena (`--engine athena`) failed, or Athena cannot be used
    /// for the pipelines chosen.
    #[error(transparent)]
    Athena(#[from] super::athena::AthenaError),
}

impl QueryError {
    /// Whether running the same statement again may succeed: the WAL was busy or changed under
    /// the query (a segment reclaimed while it was read: refresh, then retry).
    pub fn is_retryable(&self) -> bool {
        match self {
            QueryError::Wal { source, .. } => source.is_retryable(),
            QueryError::Scan { retryable, .. } => *retryable,
            QueryError::Athena(error) => error.is_retryable(),
            QueryError::Management { retryable, .. } => *retryable,
            QueryError::Landed { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// Whether the command line or configuration must change (exit code 2): Athena asked for
    /// pipelines without an `AthenaIceberg` sink, a management statement this build does not
    /// have, an unknown pipeline, a reset not confirmed.
    pub fn is_config(&self) -> bool {
        match self {
            QueryError::Athena(error) => error.is_config(),
            QueryError::NotSupported { .. } | QueryError::UnknownPipeline { .. } => true,
            QueryError::Management { config, .. } => *config,
            _ => false,
        }
    }

    /// Classify an error from DataFusion: a WAL read failing inside a scan becomes
    /// [`QueryError::Wal`], an unknown table [`QueryError::TableNotFound`].
    pub(super) fn from_datafusion(error: DataFusionError, known: &[String]) -> QueryError {
        if let Some(wal) = find_wal_error(&error) {
            return wal;
        }
        if let DataFusionError::Plan(message) = error.find_root()
            && let Some(table) = message
                .strip_prefix("table '")
                .and_then(|rest| rest.strip_suffix("' not found"))
        {
            let table = table.strip_prefix("datafusion.").unwrap_or(table);
            return QueryError::TableNotFound {
                table: table.to_owned(),
                known: known.to_vec(),
            };
        }
        QueryError::Sql(error)
    }
}

/// A WAL read error wrapped by a scan, if `error` carries one anywhere in its chain.
fn find_wal_error(error: &DataFusionError) -> Option<QueryError> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = current {
        if let Some(landed) = error.downcast_ref::<LandedFileError>() {
            return Some(QueryError::Landed {
                pipeline: landed.pipeline.clone(),
                message: format!("{}: {}", landed.location, landed.message),
                retryable: landed.retryable,
            });
        }
        if let Some(scan) = error.downcast_ref::<ScanError>() {
            return Some(QueryError::Scan {
                pipeline: scan.pipeline.clone(),
                message: scan.source.to_string(),
                retryable: scan.retryable(),
            });
        }
        current = error.source();
    }
    None
}

fn known_tables(known: &[String]) -> String {
    if known.is_empty() {
        "there are no tables (no committed batches in the WALs queried)".to_owned()
    } else {
        format!("known tables: {}", known.join(", "))
    }
}

/// A WAL read that failed inside a table scan, carried through DataFusion as an external error.
#[derive(Debug, thiserror::Error)]
#[error("pipeline '{pipeline}': {source}")]
pub(super) struct ScanError {
    pub(super) pipeline: String,
    #[source]
    pub(super) source: WalError,
}

impl ScanError {
    /// Retryable WAL errors, and a segment deleted by a reclaim since the WAL was read.
    fn retryable(&self) -> bool {
        self.source.is_retryable()
            || matches!(&self.source, WalError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// A landed file of an overwrite-on-retry destination that could not be read while a query
/// scanned it (it becomes [`QueryError::Landed`]).
#[derive(Debug, thiserror::Error)]
#[error("pipeline '{pipeline}': reading its landed file {location}: {message}")]
pub(super) struct LandedFileError {
    /// The pipeline.
    pub(super) pipeline: String,
    /// The file's path or URI.
    pub(super) location: String,
    /// What went wrong.
    pub(super) message: String,
    /// Whether reading again may succeed (the file was replaced meanwhile, S3 unreachable).
    pub(super) retryable: bool,
}
