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
    #[error("Iceberg table `{table}`: {}", iceberg_text(source))]
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
    /// A delivery did not account for every data row of its batches: fewer (or more) rows
    /// were written and skipped as landed than the batches hold. Nothing is acknowledged and
    /// the batches stay in the WAL.
    #[error(
        "{target}: WAL batches {first} to {last} hold {expected} data rows but {written} were written and {skipped} skipped as landed; not acknowledging them (the batches stay in the WAL)"
    )]
    RowsUnaccounted {
        /// The destination or table that came short.
        target: String,
        /// The first batch of the delivery.
        first: BatchId,
        /// The last batch of the delivery.
        last: BatchId,
        /// Data rows the batches hold for it.
        expected: u64,
        /// Rows written.
        written: u64,
        /// Rows skipped because their batch had landed before.
        skipped: u64,
    },
    /// A PostgreSQL operation failed (the message never holds the password or the
    /// connection string).
    #[error("Postgres destination {server}{}: {message}", table.as_ref().map(|t| format!(", table `{t}`")).unwrap_or_default())]
    Postgres {
        /// `host:port/database`.
        server: String,
        /// The table, when one is concerned.
        table: Option<String>,
        /// What went wrong.
        message: String,
        /// Whether trying again later may succeed (a lost connection, a serialization
        /// failure), not a refused statement.
        retryable: bool,
    },
    /// A failpoint fired (tests only).
    #[error("failpoint `{name}` fired")]
    Failpoint {
        /// The failpoint.
        name: &'static str,
    },
}

impl SinkError {
    /// Whether trying again later may succeed (the batches stay in the WAL either way). Each
    /// cause decides by its own flag: the AWS SDK's (throttling, 5xx, timeouts), the state
    /// store's, the WAL's, the operating system's; an Iceberg error by the flag its causes
    /// carry (see [`iceberg_retryable`]).
    pub fn is_retryable(&self) -> bool {
        match self {
            SinkError::Config { .. }
            | SinkError::IncompatibleColumn { .. }
            | SinkError::RowsUnaccounted { .. }
            | SinkError::DeadletterConfig { .. } => false,
            SinkError::Aws { source, .. } => source.is_retryable(),
            SinkError::ObjectStore { failure, .. } => failure.retryable,
            SinkError::Object(source) => source.is_retryable(),
            SinkError::Iceberg { source, .. } => iceberg_retryable(source),
            SinkError::Wal { source, .. } => source.is_retryable(),
            SinkError::Align { .. } => false,
            SinkError::Catalog { source, .. } | SinkError::LeaseLost { source, .. } => {
                source.is_retryable()
            }
            SinkError::Postgres { retryable, .. } => *retryable,
            SinkError::Io { .. } | SinkError::Failpoint { .. } => true,
        }
    }
}

/// The text of an Iceberg error and its causes for people: each cause once, joined by `: `.
/// iceberg-rust's own `Display` repeats every cause at each level of wrapping (`Unexpected =>
/// Failed to finish parquet writer., source: External: External: Unexpected => cannot write
/// x.parquet: No space left on device (os error 28), source: No space left on device (os error
/// 28)`); here that reads `Failed to finish parquet writer: cannot write x.parquet: No space left
/// on device (os error 28)`. An Iceberg error gives its message and its context (the kind is
/// left out: it is iceberg-rust's classification, not the user's); another error gives the part
/// of its text its cause does not repeat (a bare wrapper tag such as `External` gives none).
fn iceberg_text(error: &iceberg::Error) -> String {
    let mut pieces: Vec<String> = Vec::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        let next = e.source();
        let own = match e.downcast_ref::<iceberg::Error>() {
            Some(e) => iceberg_own_text(e, next),
            None => {
                let text = e.to_string();
                match next.map(|n| n.to_string()) {
                    Some(inner) if text.contains(&inner) => {
                        let rest = text.replacen(&inner, "", 1);
                        let rest =
                            rest.trim_matches(|c: char| c == ':' || c == ',' || c.is_whitespace());
                        if rest.contains(char::is_whitespace) {
                            rest.to_owned()
                        } else {
                            String::new()
                        }
                    }
                    _ => text,
                }
            }
        };
        let own = own.trim().trim_end_matches('.').to_owned();
        let repeated = pieces.last().is_some_and(|last| last.contains(&own));
        if !own.is_empty() && !repeated {
            pieces.push(own);
        }
        cause = next;
    }
    pieces.join(": ")
}

/// An Iceberg error's message with its context (`Display` without kind and cause).
fn iceberg_own_text(
    error: &iceberg::Error,
    source: Option<&(dyn std::error::Error + 'static)>,
) -> String {
    let message = error.message();
    let mut text = error.to_string();
    if let Some(head) = source.and_then(|s| text.strip_suffix(&format!(", source: {s}"))) {
        text = head.to_owned();
    }
    // `{kind}[, context: { k: v, ... }] => {message}`
    let context = text
        .strip_suffix(message)
        .and_then(|head| head.strip_suffix(" => "))
        .and_then(|head| head.split_once(", context: { "))
        .and_then(|(_, context)| context.strip_suffix(" }"));
    match context {
        Some(context) if !context.is_empty() => {
            format!("{} ({context})", message.trim_end().trim_end_matches('.'))
        }
        _ => message.to_owned(),
    }
}

/// Whether the Iceberg operation that failed with `error` may succeed when the delivery is
/// tried again later: a commit conflict (another writer committed first; the next delivery
/// works on the winner's version, and skips what it landed), or an error whose chain of causes
/// holds an Iceberg error flagged retryable. Our storages and catalogs set that flag from
/// the error they convert (the AWS SDK's, the state store's, the operating system's), and
/// iceberg-rust keeps our error as the cause when it wraps it in its own ("Failed to write
/// using parquet writer"), so the whole chain is read. Anything else, an
/// [`iceberg::ErrorKind::Unexpected`] included, is not retryable: S3 or Glue refusing access
/// stays refused.
pub fn iceberg_retryable(error: &iceberg::Error) -> bool {
    if error.kind() == iceberg::ErrorKind::CatalogCommitConflicts {
        return true;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if e.downcast_ref::<iceberg::Error>()
            .is_some_and(iceberg::Error::retryable)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::testing::sdk_failure;
    use crate::objects::ObjectError;
    use crate::sinks::iceberg::s3::S3StorageError;

    /// What the S3 storage hands iceberg-rust when a `PutObject` fails with `failure`.
    fn from_storage(status: u16, code: &str) -> iceberg::Error {
        S3StorageError::Sdk {
            operation: "PutObject",
            uri: "s3://lake/t/data/a.parquet".into(),
            failure: sdk_failure(status, code),
        }
        .into()
    }

    /// The same error as iceberg-rust's Parquet writer returns it: wrapped in its own.
    fn wrapped_by_parquet(error: iceberg::Error) -> iceberg::Error {
        iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            "Failed to write using parquet writer.",
        )
        .with_source(parquet::errors::ParquetError::External(Box::new(error)))
    }

    fn iceberg(source: iceberg::Error) -> SinkError {
        SinkError::Iceberg {
            table: "ns.t".into(),
            source: Box::new(source),
        }
    }

    #[test]
    fn an_iceberg_error_names_each_cause_once() {
        let io = std::io::Error::from_raw_os_error(28);
        let disk = iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            format!("cannot write /lake/t/data/a.parquet: {io}"),
        )
        .with_source(io);
        let finish = iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            "Failed to finish parquet writer.",
        )
        .with_context("file", "a.parquet")
        .with_source(parquet::errors::ParquetError::External(Box::new(
            parquet::errors::ParquetError::External(Box::new(disk)),
        )));
        assert_eq!(
            iceberg(finish).to_string(),
            "Iceberg table `ns.t`: Failed to finish parquet writer (file: a.parquet): cannot write \
             /lake/t/data/a.parquet: No space left on device (os error 28)"
        );
        // A cause that says something its wrapper does not is kept.
        let plain = iceberg::Error::new(iceberg::ErrorKind::DataInvalid, "bad schema")
            .with_source(std::io::Error::other("field 3 is missing"));
        assert_eq!(
            iceberg(plain).to_string(),
            "Iceberg table `ns.t`: bad schema: field 3 is missing"
        );
    }

    #[test]
    fn s3_access_denied_through_the_storage_is_not_retryable_and_a_throttle_is() {
        let denied = from_storage(403, "AccessDenied");
        assert!(!denied.retryable(), "{denied}");
        assert!(!iceberg(denied).is_retryable());
        assert!(!iceberg(wrapped_by_parquet(from_storage(403, "AccessDenied"))).is_retryable());
        for (status, code) in [
            (503, "SlowDown"),
            (500, "InternalError"),
            (400, "Throttling"),
        ] {
            let throttled = from_storage(status, code);
            assert!(throttled.retryable(), "{throttled}");
            assert!(iceberg(throttled).is_retryable(), "{code}");
            assert!(
                iceberg(wrapped_by_parquet(from_storage(status, code))).is_retryable(),
                "{code}"
            );
        }
    }

    #[test]
    fn an_unexpected_iceberg_error_is_retryable_only_when_flagged_and_a_conflict_always_is() {
        let unexpected = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "boom");
        assert!(!iceberg(unexpected).is_retryable());
        let flagged =
            iceberg::Error::new(iceberg::ErrorKind::Unexpected, "busy").with_retryable(true);
        assert!(iceberg(flagged).is_retryable());
        // Another writer landed the batches first: this delivery fails, the next one skips
        // them (iceberg-rust's own retry is off for it).
        let landed =
            iceberg::Error::new(iceberg::ErrorKind::CatalogCommitConflicts, "already landed")
                .with_retryable(false);
        assert!(iceberg(landed).is_retryable());
    }

    #[test]
    fn object_and_aws_errors_report_their_own_flag() {
        let object = |status, code| {
            SinkError::from(ObjectError::S3 {
                op: "write",
                uri: "s3://dead/p/b1.jsonl".into(),
                failure: Box::new(sdk_failure(status, code)),
            })
        };
        assert!(!object(403, "AccessDenied").is_retryable());
        assert!(object(503, "SlowDown").is_retryable());
        let denied = object(403, "AccessDenied");
        assert!(
            denied
                .to_string()
                .starts_with("cannot write `s3://dead/p/b1.jsonl`: AccessDenied (HTTP 403)"),
            "{denied}"
        );
        let aws = SinkError::Aws {
            sink: "lake".into(),
            source: crate::aws::AwsError::NoRegion,
        };
        assert!(!aws.is_retryable());
    }
}
