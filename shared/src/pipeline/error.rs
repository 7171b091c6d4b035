//! The error type of the pipeline commands.

use crate::config::ConfigError;
use crate::schema::SchemaError;
use crate::sources::SourceError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The configuration is wrong (exit code 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The source could not be read.
    #[error("pipeline '{pipeline}': {source}")]
    Source {
        /// The pipeline.
        pipeline: String,
        /// What went wrong.
        source: SourceError,
    },
    /// The schema could not be inferred, saved or loaded.
    #[error("pipeline '{pipeline}': {source}")]
    Schema {
        /// The pipeline.
        pipeline: String,
        /// What went wrong.
        source: SchemaError,
    },
    /// Delivering committed batches to the destination failed (they stay in the WAL).
    #[error("pipeline '{pipeline}': delivering to the destination: {source}")]
    Sink {
        /// The pipeline.
        pipeline: String,
        /// The cause.
        #[source]
        source: Box<crate::sinks::SinkError>,
    },
    /// Maintaining the destination's tables failed (`skipprd maintain`).
    #[error("pipeline '{pipeline}': maintaining the destination: {source}")]
    Maintain {
        /// The pipeline.
        pipeline: String,
        /// The cause.
        #[source]
        source: Box<crate::sinks::SinkError>,
    },
    /// The write-ahead log failed.
    #[error("pipeline '{pipeline}': {source}")]
    Wal {
        /// The pipeline.
        pipeline: String,
        /// What went wrong.
        source: crate::wal::WalError,
    },
    /// An error that was already shown to the user (a `sync` of several pipelines reports
    /// each failure as it happens); it only decides the exit code.
    #[error("{0}")]
    Reported(Box<PipelineError>),
    /// A query could not be set up or run.
    #[error(transparent)]
    Query(#[from] crate::query::QueryError),
    /// The interactive query session failed (terminal, history file).
    #[error("query: {message}")]
    Session {
        /// What went wrong.
        message: String,
    },
    /// A command named a namespace the pipeline's saved schema does not have.
    #[error("pipeline '{pipeline}' has no namespace '{namespace}' (it has: {})", .known.join(", "))]
    NoSuchNamespace {
        /// The pipeline.
        pipeline: String,
        /// The namespace as given.
        namespace: String,
        /// The namespaces it has.
        known: Vec<String>,
    },
    /// The state store or the writer lease failed.
    #[error("pipeline '{pipeline}': {source}")]
    State {
        /// The pipeline.
        pipeline: String,
        /// What went wrong.
        source: crate::state::StateError,
    },
    /// The AWS configuration could not be loaded (no region, runtime).
    #[error("pipeline '{pipeline}': AWS: {source}")]
    Aws {
        /// The pipeline.
        pipeline: String,
        /// What went wrong.
        #[source]
        source: crate::aws::AwsError,
    },
    /// The state store itself (not one pipeline's use of it) failed: `skipprd store create`.
    #[error("state store: {0}")]
    Store(crate::state::StateError),
    /// A file or directory of the pipeline's state could not be created or read.
    #[error("pipeline '{pipeline}': {path}: {message}")]
    Io {
        /// The pipeline.
        pipeline: String,
        /// The path.
        path: std::path::PathBuf,
        /// The OS error.
        message: String,
    },
    /// The WAL numbers its batches below an id the state store or the destination's tables
    /// already hold: it was lost or replaced (a deleted state directory), and going on would
    /// skip new batches as delivered. Nothing was read or written.
    #[error(
        "pipeline '{pipeline}': the WAL's next batch id is {wal_next}, but {holder} {id}: the WAL was lost or replaced (a deleted or new state directory?), and going on would skip new batches as already delivered. Nothing was read or written. To start the pipeline over on purpose, run `skipprd reset -p {pipeline}` (it shows what it would clear; add `--yes` to clear it); see docs/wal.md, \"A WAL that restarts\""
    )]
    WalRestarted {
        /// The pipeline.
        pipeline: String,
        /// The id the WAL would give its next batch.
        wal_next: u64,
        /// What holds the higher id (the state store's `position`, `ack`, ..., or a table).
        holder: String,
        /// The higher id.
        id: u64,
    },
    /// `reset` was run without its confirmation flag: it only reported what it would clear.
    #[error(
        "pipeline '{pipeline}': nothing was reset; run `skipprd reset -p {pipeline} --yes` to clear what is listed above"
    )]
    ResetNotConfirmed {
        /// The pipeline.
        pipeline: String,
    },
    /// The source gave no record at all, so there is nothing to infer a schema from.
    #[error(
        "pipeline '{pipeline}': read 0 records from source '{source_name}' ({deadletters} rejected); the saved schema was left unchanged"
    )]
    NothingRead {
        /// The pipeline.
        pipeline: String,
        /// The source's logical name.
        source_name: String,
        /// Records rejected on the way.
        deadletters: u64,
    },
}

impl PipelineError {
    /// The pipeline the error is about, when known.
    pub fn pipeline(&self) -> Option<&str> {
        match self {
            PipelineError::Config(_)
            | PipelineError::Query(_)
            | PipelineError::Session { .. }
            | PipelineError::Store(_) => None,
            PipelineError::Source { pipeline, .. }
            | PipelineError::Schema { pipeline, .. }
            | PipelineError::NothingRead { pipeline, .. }
            | PipelineError::WalRestarted { pipeline, .. }
            | PipelineError::ResetNotConfirmed { pipeline, .. }
            | PipelineError::State { pipeline, .. }
            | PipelineError::Io { pipeline, .. }
            | PipelineError::Aws { pipeline, .. }
            | PipelineError::Wal { pipeline, .. }
            | PipelineError::Sink { pipeline, .. }
            | PipelineError::Maintain { pipeline, .. }
            | PipelineError::NoSuchNamespace { pipeline, .. } => Some(pipeline),
            PipelineError::Reported(inner) => inner.pipeline(),
        }
    }

    /// Whether the same command might succeed if run again unchanged.
    pub fn is_retryable(&self) -> bool {
        match self {
            PipelineError::Config(e) => e.is_retryable(),
            PipelineError::Source { source, .. } => source.is_retryable(),
            PipelineError::Schema { source, .. } => source.is_retryable(),
            PipelineError::NothingRead { .. }
            | PipelineError::Io { .. }
            | PipelineError::WalRestarted { .. }
            | PipelineError::ResetNotConfirmed { .. }
            | PipelineError::NoSuchNamespace { .. } => false,
            PipelineError::Aws { source, .. } => source.is_retryable(),
            PipelineError::State { source, .. } | PipelineError::Store(source) => {
                source.is_retryable()
            }
            PipelineError::Wal { source, .. } => source.is_retryable(),
            PipelineError::Sink { source, .. } | PipelineError::Maintain { source, .. } => {
                source.is_retryable()
            }
            PipelineError::Reported(inner) => inner.is_retryable(),
            PipelineError::Query(e) => e.is_retryable(),
            PipelineError::Session { .. } => false,
        }
    }

    /// Whether the input (config or command line) must change: exit code 2.
    pub fn is_config(&self) -> bool {
        match self {
            PipelineError::Config(_)
            | PipelineError::ResetNotConfirmed { .. }
            | PipelineError::NoSuchNamespace { .. } => true,
            PipelineError::Sink { source, .. } | PipelineError::Maintain { source, .. } => {
                matches!(**source, crate::sinks::SinkError::Config { .. })
            }
            PipelineError::Reported(inner) => inner.is_config(),
            PipelineError::Query(e) => e.is_config(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::testing::sdk_failure;
    use crate::sinks::SinkError;

    fn delivering(source: SinkError) -> PipelineError {
        PipelineError::Sink {
            pipeline: "events".into(),
            source: Box::new(source),
        }
    }

    /// A `PutObject` of the lake failing with `status`/`code`, as the S3 storage reports it.
    fn lake_put(status: u16, code: &str) -> SinkError {
        SinkError::Iceberg {
            table: "ns.t".into(),
            source: Box::new(
                crate::sinks::iceberg::s3::S3StorageError::Sdk {
                    operation: "PutObject",
                    uri: "s3://lake/ns/t/data/a.parquet".into(),
                    failure: sdk_failure(status, code),
                }
                .into(),
            ),
        }
    }

    #[test]
    fn a_delivery_is_retryable_exactly_when_its_sink_error_is() {
        for (status, code, retryable) in [
            (403, "AccessDenied", false),
            (404, "NoSuchBucket", false),
            (503, "SlowDown", true),
            (400, "ThrottlingException", true),
        ] {
            let sink = lake_put(status, code);
            assert_eq!(sink.is_retryable(), retryable, "{sink}");
            let pipeline = delivering(lake_put(status, code));
            assert_eq!(pipeline.is_retryable(), retryable, "{pipeline}");
            assert!(!pipeline.is_config(), "{pipeline}");
        }
    }

    #[test]
    fn the_aws_error_stays_typed_and_decides_retryable() {
        let error = PipelineError::Aws {
            pipeline: "events".into(),
            source: crate::aws::AwsError::NoRegion,
        };
        assert!(!error.is_retryable());
        assert_eq!(error.pipeline(), Some("events"));
        assert!(
            error
                .to_string()
                .starts_with("pipeline 'events': AWS: no AWS region is set")
        );
        let source = std::error::Error::source(&error).map(ToString::to_string);
        assert_eq!(source, Some(crate::aws::AwsError::NoRegion.to_string()));
        let missing = PipelineError::Aws {
            pipeline: "events".into(),
            source: crate::aws::AwsError::NotLoaded {
                purpose: "the S3 WAL",
            },
        };
        assert_eq!(
            missing.to_string(),
            "pipeline 'events': AWS: no AWS configuration was loaded for the S3 WAL"
        );
    }
}
