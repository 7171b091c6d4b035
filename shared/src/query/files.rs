//! The landed side of a pipeline with a `File` destination (Parquet): each table's files of
//! this pipeline whose WAL batch is at or below the table's landed marker (see
//! [`crate::sinks::files`]), unioned with the WAL batches above it, so a row is counted once
//! even while a crashed delivery's files of later batches lie beside them.
//!
//! The same holds for an `S3` destination in Parquet: its objects are listed and read through
//! an S3 client of the destination's region and endpoint (see [`FilesSource::s3`]).
//!
//! Destinations this build cannot read back are refused by name (never a WAL-only answer that
//! would silently miss the reclaimed rows): `File` and `S3` files in `jsonl` or `csv`, and
//! `Athena` tables (their files carry Glue's column names; use `query --engine athena`).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use futures::{StreamExt as _, TryStreamExt as _};
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::arrow::async_reader::ParquetObjectReader;

use crate::config::ValidatedPipeline;
use crate::config::connectors::OutputFormat;
use crate::config::validate::FileDestinationKind;
use crate::schema::adapt::merge_schemas;
use crate::sinks::Sink as _;
use crate::sinks::files::FileSink;

use super::QueryError;
use super::lake::LakePart;
use super::s3_objects::FileIoObjects;

/// A pipeline's overwrite-on-retry destination, as the query reads it back.
#[derive(Debug, Clone)]
pub(super) struct FilesSource {
    /// The destination's sink: its markers and file names.
    pub(super) sink: Arc<FileSink>,
    /// For an `S3` destination: its bucket and the objects' reader, registered with DataFusion
    /// for `s3://{bucket}`. `None` for a local directory.
    pub(super) s3: Option<(String, Arc<FileIoObjects>)>,
}

/// The `File` or `S3` destination of a pipeline; `None` without an overwrite-on-retry
/// destination or with `Stdout`; an error for one that cannot be read back.
pub(super) fn files_source(
    pipeline: &ValidatedPipeline,
) -> Result<Option<FilesSource>, QueryError> {
    let Some(dest) = &pipeline.files else {
        return Ok(None);
    };
    let unsupported = |reason: String| QueryError::Unsupported {
        pipeline: pipeline.name.clone(),
        reason,
    };
    let not_parquet = || {
        unsupported(format!(
            "its data_sink '{}' writes {:?} files, which `query` does not read back yet (only Parquet)",
            dest.name, dest.format
        ))
    };
    let open = |aws: Option<&crate::aws::Aws>| {
        FileSink::for_destination(dest, &pipeline.store.partition, aws)
            .map(Arc::new)
            .map_err(|e| unsupported(e.to_string()))
    };
    match &dest.kind {
        FileDestinationKind::File { .. } if dest.format == OutputFormat::Parquet => {
            Ok(Some(FilesSource {
                sink: open(None)?,
                s3: None,
            }))
        }
        FileDestinationKind::S3 {
            bucket,
            region,
            endpoint,
            ..
        } if dest.format == OutputFormat::Parquet => {
            let aws = crate::aws::Aws::load(region.as_deref()).map_err(|e| QueryError::Aws {
                pipeline: pipeline.name.clone(),
                message: e.to_string(),
            })?;
            let file_io = crate::sinks::iceberg::s3::s3_file_io(&aws, endpoint.as_deref());
            Ok(Some(FilesSource {
                sink: open(Some(&aws))?,
                s3: Some((
                    bucket.clone(),
                    Arc::new(FileIoObjects::new(bucket.clone(), file_io)),
                )),
            }))
        }
        FileDestinationKind::File { .. } | FileDestinationKind::S3 { .. } => Err(not_parquet()),
        FileDestinationKind::Athena(_) => Err(unsupported(format!(
            "its data_sink '{}' is an Athena table: query it with `--engine athena`",
            dest.name
        ))),
        // Nothing is kept: the WAL is all there is.
        FileDestinationKind::Stdout => Ok(None),
    }
}

/// How many landed S3 objects have their footers read at once.
const FOOTER_READS: usize = 16;

/// The landed files of every table `source`'s pipeline has a marker for, each table's schema
/// merged from its files' footers (of S3 objects only the footers are read, [`FOOTER_READS`]
/// at a time).
pub(super) async fn load_files(
    pipeline: &str,
    source: &FilesSource,
) -> Result<BTreeMap<String, LakePart>, QueryError> {
    let failed = |message: String, retryable: bool| QueryError::Landed {
        pipeline: pipeline.to_owned(),
        message,
        retryable,
    };
    let sink_failed = |e: crate::sinks::SinkError| failed(e.to_string(), e.is_retryable());
    let sink = &source.sink;
    let mut parts = BTreeMap::new();
    for table in sink.landed_tables().map_err(sink_failed)? {
        let landed = sink.landed(&table).map_err(sink_failed)?;
        if landed == 0 {
            continue;
        }
        let locations = sink.data_files(&table, landed).map_err(sink_failed)?;
        // In the order of `data_files` (sorted).
        let landed_files: Vec<(String, SchemaRef)> = match &source.s3 {
            None => locations
                .into_iter()
                .map(|location| {
                    let schema = local_footer(&location)
                        .map_err(|(message, retryable)| failed(message, retryable))?;
                    Ok((format!("file://{location}"), schema))
                })
                .collect::<Result<_, QueryError>>()?,
            Some((bucket, store)) => futures::stream::iter(locations)
                .map(|location| async move {
                    let schema = s3_footer(bucket, store, &location).await?;
                    Ok::<_, (String, bool)>((location, schema))
                })
                .buffered(FOOTER_READS)
                .try_collect()
                .await
                .map_err(|(message, retryable)| failed(message, retryable))?,
        };
        let schemas: Vec<SchemaRef> = landed_files.iter().map(|(_, s)| Arc::clone(s)).collect();
        parts.insert(
            table,
            LakePart {
                landed,
                schema: merge_schemas(&schemas),
                files: landed_files.into_iter().map(|(file, _)| file).collect(),
            },
        );
    }
    Ok(parts)
}

/// The Arrow schema in the footer of the local Parquet file at `path`; on failure the message
/// (naming the file) and whether reading again may succeed.
fn local_footer(path: &str) -> Result<SchemaRef, (String, bool)> {
    let file = std::fs::File::open(path).map_err(|e| (format!("{path}: {e}"), true))?;
    let meta = ArrowReaderMetadata::load(&file, Default::default())
        .map_err(|e| (format!("{path}: {e}"), false))?;
    Ok(Arc::clone(meta.schema()))
}

/// The Arrow schema in the footer of the object at `location` (`s3://{bucket}/{key}`), read
/// with ranged GETs; on failure the message and whether reading again may succeed.
async fn s3_footer(
    bucket: &str,
    store: &Arc<FileIoObjects>,
    location: &str,
) -> Result<SchemaRef, (String, bool)> {
    let key = location
        .strip_prefix("s3://")
        .and_then(|rest| rest.strip_prefix(bucket))
        .and_then(|rest| rest.strip_prefix('/'))
        .ok_or_else(|| (format!("{location} is not in s3://{bucket}"), false))?;
    let path =
        object_store::path::Path::parse(key).map_err(|e| (format!("{location}: {e}"), false))?;
    // The footer is fetched with suffix range reads (no HEAD for the size first). A store
    // failure (an object listed a moment ago and replaced since, S3 unreachable) may pass if
    // read again; a file that is not Parquet will not.
    let store: Arc<dyn object_store::ObjectStore> = Arc::clone(store) as _;
    let reader = ParquetObjectReader::new(store, path);
    let builder = ParquetRecordBatchStreamBuilder::new(reader)
        .await
        .map_err(|e| {
            let retryable = matches!(e, parquet::errors::ParquetError::External(_));
            (format!("{location}: {e}"), retryable)
        })?;
    Ok(Arc::clone(builder.schema()))
}
