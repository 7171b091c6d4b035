//! The landed files of an overwrite-on-retry destination that DataFusion's Parquet scan cannot
//! read as they are: an `Athena` sink's Parquet (Glue's lower-case column names, the identity
//! partition columns only in the directory names) and `File`/`S3` files in `jsonl` or `csv`.
//!
//! [`FilesTable`] reads them whole, file by file (a file is one WAL batch part, so memory
//! stays bounded by one part), spread over the session's partitions, and hands out batches
//! of the table schema (the saved pipeline schema's namespace, which every landed file was
//! written from):
//!
//! - **Athena Parquet**: only the projected columns are decoded; each column and struct child
//!   is found under its Glue name ([`glue_column_name`]) and read back under its own key. A
//!   partition column's value is the one Glue has registered for the file's directory (the
//!   values Athena itself reads; the directory name may be cut to a hash for a long value),
//!   else the directory name's, converted to the column's type; `null` is a null.
//! - **JSON lines**: decoded with the table schema; a key a file lacks is null.
//! - **CSV**: columns matched by the file's header, so files written before a column was
//!   added read it as null. CSV has no nesting and no null: a struct or list column is the
//!   text the file holds (the same text for the rows still in the WAL, see [`text_batch`]), and
//!   an empty field reads as null.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::io::Cursor;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, StringArray, new_null_array};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use bytes::Bytes;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use futures::StreamExt as _;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::config::connectors::OutputFormat;
use crate::schema::adapt::{adapt_array_named, adapt_batch, find};
use crate::schema::naming::dotted_key;
use crate::schema::naming::{glue_column_name, partition_segment_value};

use super::error::LandedFileError;
use super::s3_objects::FileIoObjects;

/// Rows per decoded batch.
const BATCH_ROWS: usize = 8192;

/// Where the files are.
#[derive(Debug, Clone)]
pub(super) enum Objects {
    /// Local paths.
    Local,
    /// `s3://{bucket}/{key}` URIs, read through this store.
    S3 {
        /// The bucket.
        bucket: String,
        /// Its objects.
        store: Arc<FileIoObjects>,
    },
}

impl Objects {
    /// The whole file at `location`; on failure the message and whether reading again may
    /// succeed.
    async fn read(&self, location: &str) -> Result<Bytes, (String, bool)> {
        match self {
            Objects::Local => tokio::fs::read(location)
                .await
                .map(Bytes::from)
                .map_err(|e| (e.to_string(), true)),
            Objects::S3 { bucket, store } => {
                use object_store::ObjectStoreExt as _;
                let key = location
                    .strip_prefix("s3://")
                    .and_then(|rest| rest.strip_prefix(bucket.as_str()))
                    .and_then(|rest| rest.strip_prefix('/'))
                    .ok_or_else(|| (format!("not in s3://{bucket}"), false))?;
                let path =
                    object_store::path::Path::parse(key).map_err(|e| (e.to_string(), false))?;
                // A file listed a moment ago may be replaced meanwhile, or S3 unreachable.
                let object = store.get(&path).await.map_err(|e| (e.to_string(), true))?;
                object.bytes().await.map_err(|e| (e.to_string(), true))
            }
        }
    }
}

/// How one destination's landed files are decoded (see the module docs).
#[derive(Debug)]
pub(super) struct FileReader {
    /// The pipeline, for messages.
    pub(super) pipeline: String,
    /// The files' format.
    pub(super) format: OutputFormat,
    /// Columns and struct children are stored under Glue's names (an `Athena` sink).
    pub(super) glue_names: bool,
    /// The columns whose values are in the directory names, each with its index among the
    /// partition keys (whose values a directory has in key order).
    pub(super) path_columns: Vec<(String, usize)>,
    /// How many partition keys (directory levels) a file is below its table directory.
    pub(super) key_count: usize,
    /// The registered partitions: directory URI (ending in `/`) -> values in key order.
    pub(super) partitions: HashMap<String, Vec<Option<String>>>,
    /// Where the files are.
    pub(super) objects: Objects,
}

impl FileReader {
    /// The rows of the file at `location` as batches of `schema` (the projected table
    /// schema); `full` is the whole table schema.
    async fn read(
        &self,
        location: &str,
        schema: &SchemaRef,
        full: &SchemaRef,
    ) -> Result<Vec<RecordBatch>, LandedFileError> {
        let failed = |message: String, retryable: bool| LandedFileError {
            pipeline: self.pipeline.clone(),
            location: location.to_owned(),
            message,
            retryable,
        };
        let bytes = self
            .objects
            .read(location)
            .await
            .map_err(|(message, retryable)| failed(message, retryable))?;
        let batches = match self.format {
            OutputFormat::Parquet => self.parquet(bytes, schema),
            OutputFormat::Jsonl => json(bytes, schema, full),
            OutputFormat::Csv => csv(bytes, schema, full),
        }
        .map_err(|e| failed(e.to_string(), false))?;
        if self.path_columns.is_empty() {
            return Ok(batches);
        }
        let values = self.partition_values(location);
        batches
            .into_iter()
            .map(|batch| self.with_path_columns(batch, &values))
            .collect::<Result<_, _>>()
            .map_err(|e| failed(e.to_string(), false))
    }

    /// Decode the projected columns of a Parquet file.
    fn parquet(&self, bytes: Bytes, schema: &SchemaRef) -> Result<Vec<RecordBatch>, ArrowError> {
        let external = |e: parquet::errors::ParquetError| ArrowError::ExternalError(Box::new(e));
        let glue = self.glue_names;
        let stored = move |name: &str| {
            if glue {
                glue_column_name(name)
            } else {
                name.to_owned()
            }
        };
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(external)?;
        let file_schema = Arc::clone(builder.schema());
        let mut roots: Vec<usize> = schema
            .fields()
            .iter()
            .filter_map(|f| {
                let at = |name: &str| file_schema.index_of(&stored(name)).ok();
                at(f.name()).or_else(|| {
                    // A column the Iceberg sink undotted, in a file from before (see `adapt`).
                    let key = dotted_key(f.name())?;
                    (!schema.fields().iter().any(|g| *g.name() == key))
                        .then(|| at(&key))
                        .flatten()
                })
            })
            .collect();
        roots.sort_unstable();
        roots.dedup();
        if roots.is_empty() {
            // Nothing to decode (a count, or only partition columns): the footer's row count.
            let rows = usize::try_from(builder.metadata().file_metadata().num_rows())
                .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            return null_batches(schema, rows);
        }
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        let reader = builder
            .with_projection(mask)
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(external)?;
        let mut out = Vec::new();
        for batch in reader {
            let batch = batch?;
            let columns = schema
                .fields()
                .iter()
                .map(|field| {
                    match find(schema.fields(), field.name(), |name| {
                        batch.column_by_name(&stored(name))
                    }) {
                        Some(column) => adapt_array_named(column, field.data_type(), &stored),
                        None => Ok(new_null_array(field.data_type(), batch.num_rows())),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            out.push(RecordBatch::try_new_with_options(
                Arc::clone(schema),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
            )?);
        }
        Ok(out)
    }

    /// The partition values of the file at `location`, in key order: Glue's for its
    /// directory, else read from the directory names.
    fn partition_values(&self, location: &str) -> Vec<Option<String>> {
        let dir = location.rfind('/').map_or("", |at| &location[..=at]);
        if let Some(values) = self.partitions.get(dir) {
            return values.clone();
        }
        let segments: Vec<&str> = dir.trim_end_matches('/').rsplit('/').collect();
        (0..self.key_count)
            .rev()
            .map(|level| {
                segments
                    .get(level)
                    .and_then(|s| partition_segment_value(s))
                    .flatten()
            })
            .collect()
    }

    /// `batch` with its partition columns set to the file's `values`.
    fn with_path_columns(
        &self,
        batch: RecordBatch,
        values: &[Option<String>],
    ) -> Result<RecordBatch, ArrowError> {
        let schema = batch.schema();
        let rows = batch.num_rows();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        for (name, key) in &self.path_columns {
            let Ok(at) = schema.index_of(name) else {
                continue;
            };
            let to = schema.field(at).data_type();
            columns[at] = match values.get(*key).cloned().flatten() {
                None => new_null_array(to, rows),
                Some(value) => {
                    let text: ArrayRef = Arc::new(StringArray::from(vec![value.as_str(); rows]));
                    cast_with_options(
                        &text,
                        to,
                        &CastOptions {
                            safe: false,
                            ..CastOptions::default()
                        },
                    )
                    .map_err(|e| {
                        ArrowError::CastError(format!(
                            "partition column `{name}`: the directory's value `{value}` is not a {to}: {e}"
                        ))
                    })?
                }
            };
        }
        RecordBatch::try_new_with_options(
            schema,
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
    }
}

/// `rows` rows of nulls with `schema`, in batches of [`BATCH_ROWS`].
fn null_batches(schema: &SchemaRef, rows: usize) -> Result<Vec<RecordBatch>, ArrowError> {
    let mut out = Vec::new();
    let mut left = rows;
    while left > 0 {
        let n = left.min(BATCH_ROWS);
        let columns = schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), n))
            .collect();
        out.push(RecordBatch::try_new_with_options(
            Arc::clone(schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?);
        left -= n;
    }
    Ok(out)
}

/// The fields to decode for `schema`: itself, or, when it has no column (a count), the table
/// schema's first one, so that rows are still counted.
fn decoded_fields(schema: &SchemaRef, full: &SchemaRef) -> SchemaRef {
    if schema.fields().is_empty()
        && let Some(first) = full.fields().first()
    {
        return Arc::new(Schema::new(vec![Arc::clone(first)]));
    }
    Arc::clone(schema)
}

/// Decode a JSON lines file as `schema`.
fn json(
    bytes: Bytes,
    schema: &SchemaRef,
    full: &SchemaRef,
) -> Result<Vec<RecordBatch>, ArrowError> {
    let decoded = decoded_fields(schema, full);
    arrow::json::ReaderBuilder::new(Arc::clone(&decoded))
        .with_batch_size(BATCH_ROWS)
        .build(Cursor::new(bytes))?
        .map(|batch| batch.and_then(|b| adapt_batch(&b, schema)))
        .collect()
}

/// Decode a CSV file as `schema`, its columns matched by the header's names.
fn csv(bytes: Bytes, schema: &SchemaRef, full: &SchemaRef) -> Result<Vec<RecordBatch>, ArrowError> {
    let (header, _) = arrow::csv::reader::Format::default()
        .with_header(true)
        .infer_schema(Cursor::new(bytes.clone()), Some(0))?;
    let fields: Vec<Field> = header
        .fields()
        .iter()
        .map(|h| match full.field_with_name(h.name()) {
            Ok(f) => Field::new(h.name(), f.data_type().clone(), true),
            Err(_) => Field::new(h.name(), DataType::Utf8, true),
        })
        .collect();
    let wanted = decoded_fields(schema, full);
    let mut projection: Vec<usize> = fields
        .iter()
        .enumerate()
        .filter(|(_, f)| wanted.field_with_name(f.name()).is_ok())
        .map(|(i, _)| i)
        .collect();
    if projection.is_empty() && !fields.is_empty() {
        projection.push(0);
    }
    arrow::csv::ReaderBuilder::new(Arc::new(Schema::new(fields)))
        .with_header(true)
        .with_batch_size(BATCH_ROWS)
        .with_projection(projection)
        .build(Cursor::new(bytes))?
        .map(|batch| batch.and_then(|b| adapt_batch(&b, schema)))
        .collect()
}

/// Whether a column of type `t` is written to CSV as text ([`text_type`] of it differs).
fn is_text_in_csv(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Struct(_)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(_, _)
            | DataType::Map(_, _)
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::FixedSizeBinary(_)
    )
}

/// `schema` as a CSV file holds it: nested and binary columns as text.
pub(super) fn text_schema(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| {
                if is_text_in_csv(f.data_type()) {
                    Field::new(f.name(), DataType::Utf8, true)
                } else {
                    f.as_ref().clone()
                }
            })
            .collect::<Vec<_>>(),
    ))
}

/// `batch` as a CSV file holds it: each nested or binary column as the text the CSV writer
/// writes for it ([`crate::sinks::files::encode`]), nulls kept.
pub(super) fn text_batch(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| is_text_in_csv(f.data_type()))
    {
        return Ok(batch.clone());
    }
    let options = FormatOptions::default();
    let columns = batch
        .columns()
        .iter()
        .map(|column| {
            if !is_text_in_csv(column.data_type()) {
                return Ok(Arc::clone(column));
            }
            let formatter = ArrayFormatter::try_new(column.as_ref(), &options)?;
            let text: StringArray = (0..column.len())
                .map(|i| column.is_valid(i).then(|| formatter.value(i).to_string()))
                .collect();
            Ok(Arc::new(text) as ArrayRef)
        })
        .collect::<Result<Vec<_>, ArrowError>>()?;
    RecordBatch::try_new_with_options(
        text_schema(&batch.schema()),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
}

/// A namespace's landed files, read by a [`FileReader`].
pub(super) struct FilesTable {
    /// The table schema.
    pub(super) schema: SchemaRef,
    /// The files.
    pub(super) files: Arc<[String]>,
    /// How they are read.
    pub(super) reader: Arc<FileReader>,
}

impl fmt::Debug for FilesTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilesTable")
            .field("files", &self.files.len())
            .field("format", &self.reader.format)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl TableProvider for FilesTable {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let projected = match projection {
            Some(indices) => Arc::new(self.schema.project(indices)?),
            None => Arc::clone(&self.schema),
        };
        let n = state
            .config()
            .target_partitions()
            .clamp(1, self.files.len().max(1));
        let partitions: Vec<Arc<dyn PartitionStream>> = (0..n)
            .map(|at| {
                Arc::new(FilesPartition {
                    files: self.files.iter().skip(at).step_by(n).cloned().collect(),
                    schema: Arc::clone(&projected),
                    full: Arc::clone(&self.schema),
                    reader: Arc::clone(&self.reader),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        StreamingTable::try_new(projected, partitions)?
            .scan(state, None, &[], limit)
            .await
    }
}

/// Some of a table's files, read one after the other.
#[derive(Debug)]
struct FilesPartition {
    files: Vec<String>,
    /// The projected table schema.
    schema: SchemaRef,
    full: SchemaRef,
    reader: Arc<FileReader>,
}

impl PartitionStream for FilesPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let reader = Arc::clone(&self.reader);
        let schema = Arc::clone(&self.schema);
        let full = Arc::clone(&self.full);
        let batches = futures::stream::iter(self.files.clone())
            .then(move |location| {
                let reader = Arc::clone(&reader);
                let schema = Arc::clone(&schema);
                let full = Arc::clone(&full);
                async move {
                    let batches: Vec<DfResult<RecordBatch>> =
                        match reader.read(&location, &schema, &full).await {
                            Ok(batches) => batches.into_iter().map(Ok).collect(),
                            Err(e) => vec![Err(DataFusionError::External(Box::new(e)))],
                        };
                    futures::stream::iter(batches)
                }
            })
            .flatten();
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            batches,
        ))
    }
}
