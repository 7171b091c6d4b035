//! The landed side of a pipeline with an overwrite-on-retry destination (`File`, `S3`,
//! `Athena`): each table's files of this pipeline whose WAL batch is at or below the table's
//! landed marker (see [`crate::sinks::files`]), unioned with the WAL batches above it, so a
//! row is counted once even while a crashed delivery's files of later batches lie beside them.
//!
//! `File` and `S3` Parquet files carry the schema's own column names: DataFusion's Parquet
//! scan reads them, with the schema merged from their footers. Every other kind (an `Athena`
//! sink's Parquet under Glue's names with the partition columns in the directories, JSON
//! lines, CSV) is read by [`super::landed`] with the namespace's schema as the pipeline's
//! saved schema has it (the schema every landed file was written from; `sync` saves it
//! before it commits a batch of a new shape). S3 objects are read through an S3 client of the
//! destination's region and endpoint.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use futures::{StreamExt as _, TryStreamExt as _};
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::arrow::async_reader::ParquetObjectReader;

use crate::config::ValidatedPipeline;
use crate::config::connectors::OutputFormat;
use crate::config::validate::{FileDestinationKind, Settings};
use crate::schema::adapt::merge_schemas;
use crate::schema::{PipelineSchema, PipelineSchemaStore, SchemaError, SchemaStore as _};
use crate::sinks::Sink as _;
use crate::sinks::files::FileSink;

use super::QueryError;
use super::lake::LakePart;
use super::landed::{FileReader, Objects, text_schema};
use super::s3_objects::FileIoObjects;

/// A pipeline's overwrite-on-retry destination, as the query reads it back.
#[derive(Debug, Clone)]
pub(super) struct FilesSource {
    /// The destination's sink: its markers and file names.
    pub(super) sink: Arc<FileSink>,
    /// For an `S3` or `Athena` destination: its bucket and the objects' reader, registered
    /// with DataFusion for `s3://{bucket}`. `None` for a local directory.
    pub(super) s3: Option<(String, Arc<FileIoObjects>)>,
    /// Where the pipeline's schema is saved.
    pub(super) schemas: Arc<PipelineSchemaStore>,
}

/// The overwrite-on-retry destination of a pipeline; `None` without one or with `Stdout`.
pub(super) fn files_source(
    settings: &Settings,
    pipeline: &ValidatedPipeline,
) -> Result<Option<FilesSource>, QueryError> {
    let Some(dest) = &pipeline.files else {
        return Ok(None);
    };
    let unsupported = |reason: String| QueryError::Unsupported {
        pipeline: pipeline.name.clone(),
        reason,
    };
    let aws_of = |region: Option<&str>| {
        crate::aws::Aws::load(region).map_err(|e| QueryError::Aws {
            pipeline: pipeline.name.clone(),
            message: e.to_string(),
        })
    };
    let (aws, s3) = match &dest.kind {
        // Nothing is kept: the WAL is all there is.
        FileDestinationKind::Stdout => return Ok(None),
        FileDestinationKind::File { .. } => (None, None),
        FileDestinationKind::S3 {
            bucket,
            region,
            endpoint,
            ..
        } => {
            let aws = aws_of(region.as_deref())?;
            let file_io = crate::sinks::iceberg::s3::s3_file_io(&aws, endpoint.as_deref());
            let objects = Arc::new(FileIoObjects::new(bucket.clone(), file_io));
            (Some(aws), Some((bucket.clone(), objects)))
        }
        FileDestinationKind::Athena(t) => {
            let aws = aws_of(t.region.as_deref())?;
            let file_io = crate::sinks::iceberg::s3::s3_file_io(&aws, None);
            let objects = Arc::new(FileIoObjects::new(t.bucket.clone(), file_io));
            (Some(aws), Some((t.bucket.clone(), objects)))
        }
    };
    let sink = FileSink::for_destination(dest, &pipeline.store.partition, aws.as_ref())
        .map_err(|e| unsupported(e.to_string()))?;
    let schemas = crate::pipeline::discover::schema_store(settings, pipeline, aws.as_ref())
        .map_err(|e| unsupported(e.to_string()))?;
    Ok(Some(FilesSource {
        sink: Arc::new(sink),
        s3,
        schemas: Arc::new(schemas),
    }))
}

/// How many landed S3 objects have their footers read at once.
const FOOTER_READS: usize = 16;

/// The landed files of every table `source`'s pipeline has a marker for, by namespace (the
/// saved schema's namespace whose table it is, else the table's name). Parquet files with the
/// schema's own names get the schema merged from their footers (of S3 objects only the
/// footers are read, [`FOOTER_READS`] at a time); the others the saved schema's.
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
    let tables = sink.landed_tables().map_err(sink_failed)?;
    if tables.is_empty() {
        return Ok(BTreeMap::new());
    }
    let saved = match source.schemas.load() {
        Ok(saved) => Some(saved),
        Err(SchemaError::NotFound { .. }) => None,
        Err(e) => return Err(failed(e.to_string(), e.is_retryable())),
    };
    let footers = sink.format() == OutputFormat::Parquet && !sink.glue_names();
    let mut parts = BTreeMap::new();
    for table in tables {
        let namespace = saved.as_ref().and_then(|s| {
            s.namespaces
                .keys()
                .find(|ns| FileSink::table_of(ns) == table)
                .cloned()
        });
        let landed = sink
            .landed(namespace.as_deref().unwrap_or(&table))
            .map_err(sink_failed)?;
        if landed == 0 {
            continue;
        }
        let locations = sink.data_files(&table, landed).map_err(sink_failed)?;
        let part = if footers {
            footer_part(source, landed, locations)
                .await
                .map_err(|(message, retryable)| failed(message, retryable))?
        } else {
            let schema = namespace
                .as_deref()
                .and_then(|ns| saved_schema(saved.as_ref()?, ns))
                .ok_or_else(|| QueryError::Unsupported {
                    pipeline: pipeline.to_owned(),
                    reason: format!(
                        "its table `{table}` has landed files but the saved schema at {} has no namespace for it, and its {} files cannot be read without one",
                        source.schemas.location(),
                        crate::sinks::files::encode::extension(sink.format()),
                    ),
                })?;
            reader_part(pipeline, source, &table, landed, locations, schema).map_err(sink_failed)?
        };
        parts.insert(namespace.unwrap_or(table), part);
    }
    Ok(parts)
}

/// The Arrow schema of `namespace` in `saved`, as the sinks write it.
fn saved_schema(saved: &PipelineSchema, namespace: &str) -> Option<SchemaRef> {
    saved
        .namespaces
        .get(namespace)
        .map(|ns| Arc::new(crate::schema::to_arrow_schema(&ns.fields)))
}

/// A table of Parquet files with the schema's own names: its schema from their footers.
async fn footer_part(
    source: &FilesSource,
    landed: u64,
    locations: Vec<String>,
) -> Result<LakePart, (String, bool)> {
    // In the order of `data_files` (sorted).
    let landed_files: Vec<(String, SchemaRef)> = match &source.s3 {
        None => locations
            .into_iter()
            .map(|location| {
                let schema = local_footer(&location)?;
                Ok((format!("file://{location}"), schema))
            })
            .collect::<Result<_, (String, bool)>>()?,
        Some((bucket, store)) => {
            futures::stream::iter(locations)
                .map(|location| async move {
                    let schema = s3_footer(bucket, store, &location).await?;
                    Ok::<_, (String, bool)>((location, schema))
                })
                .buffered(FOOTER_READS)
                .try_collect()
                .await?
        }
    };
    let schemas: Vec<SchemaRef> = landed_files.iter().map(|(_, s)| Arc::clone(s)).collect();
    Ok(LakePart {
        landed,
        schema: merge_schemas(&schemas),
        files: landed_files.into_iter().map(|(file, _)| file).collect(),
        reader: None,
    })
}

/// A table read by a [`FileReader`], with the saved schema's `schema` (as text where CSV
/// holds text).
fn reader_part(
    pipeline: &str,
    source: &FilesSource,
    table: &str,
    landed: u64,
    locations: Vec<String>,
    schema: SchemaRef,
) -> Result<LakePart, crate::sinks::SinkError> {
    let sink = &source.sink;
    let keys = sink.partition_key_names();
    let path_columns: Vec<(String, usize)> = sink
        .columns_in_paths()
        .into_iter()
        .filter_map(|column| {
            let at = keys.iter().position(|k| *k == column)?;
            Some((column, at))
        })
        .collect();
    // Glue's record of each directory's values, when some column is only there.
    let mut partitions = HashMap::new();
    if !path_columns.is_empty() {
        for (values, location) in sink.registered_partitions(table)?.unwrap_or_default() {
            let values = values
                .into_iter()
                .map(|v| (v != "null").then_some(v))
                .collect();
            partitions.insert(location, values);
        }
    }
    let format = sink.format();
    Ok(LakePart {
        landed,
        schema: match format {
            OutputFormat::Csv => text_schema(&schema),
            _ => schema,
        },
        files: locations,
        reader: Some(Arc::new(FileReader {
            pipeline: pipeline.to_owned(),
            format,
            glue_names: sink.glue_names(),
            path_columns,
            key_count: keys.len(),
            partitions,
            objects: match &source.s3 {
                Some((bucket, store)) => Objects::S3 {
                    bucket: bucket.clone(),
                    store: Arc::clone(store),
                },
                None => Objects::Local,
            },
        })),
    })
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
