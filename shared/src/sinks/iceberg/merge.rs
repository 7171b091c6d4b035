//! `write_policy: merge_by_key` on Iceberg tables, by copy-on-write: readers need no delete
//! files (DuckDB's `iceberg_scan` and PyIceberg both read the result as plain data files).
//!
//! One delivery of a table is merged in one snapshot:
//!
//! 1. the delivery's rows (source order) are reduced to the newest version of each key; with
//!    an `_op` column (a change stream) a key whose newest version is a delete (`d`) keeps no
//!    row, and a truncate (`t`) drops the table's rows and the delivery's rows before it;
//! 2. every live data file holding a delivered key is read and written again without the
//!    rows of those keys (a file that keeps no row is only removed); with a truncate, every
//!    live file is removed;
//! 3. the newest rows are written as new data files (partitioned as the table is);
//! 4. one `overwrite` snapshot removes the replaced files and adds the new ones, with the
//!    batch ids in its summary and the landed property set in the same commit, required to
//!    apply to the same table whose `main` is still the snapshot merged into: a concurrent
//!    commit makes it fail, nothing is lost, and the written files are deleted.
//!
//! The cost is the files touched: a delivery re-reads every file of the table whose keys it
//! carries (every file, when no file can be told apart; pruning by column bounds is future
//! work). Under a declared `merge_by_key`, typing refuses a record without a key value of its
//! own (a `bad_key` deadletter, [`crate::schema::RecordBatchBuilder::with_merge_key`]), so
//! no two records share a NULL key here; a NULL that still arrives (a change stream's table
//! keys, not known at typing) is compared as a value.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, filter_record_batch, take_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, Rows, SortField};
use iceberg::ErrorKind;
use iceberg::spec::{DataFile, DataFileFormat, FormatVersion, PartitionKey};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::DefaultFileNameGenerator;
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};

use super::IcebergSink;
use super::location::{LakeLocationGenerator, Started};
use super::maintain::compact::{Live, discard, live_files, read_adapted};
use crate::sinks::SinkError;
use crate::wal::BatchId;

/// The column a change stream marks each record's operation in.
pub const OP_COLUMN: &str = "_op";

/// The column naming the columns a change did not carry.
const UNCHANGED_COLUMN: &str = crate::sources::postgres::cdc::UNCHANGED;

/// The delivery's rows reduced to what the table should hold of their keys.
struct Reduced {
    /// The newest row of each key that is not a delete, in source order.
    keep: RecordBatch,
    /// Every key the delivery carries (after its last truncate).
    keys: HashSet<Vec<u8>>,
    /// The delivery truncates the table.
    truncate: bool,
}

/// The key columns of `batch` as comparable rows.
fn key_rows(
    converter: &RowConverter,
    batch: &RecordBatch,
    key: &[usize],
) -> Result<Rows, arrow::error::ArrowError> {
    let columns: Vec<_> = key.iter().map(|&i| Arc::clone(batch.column(i))).collect();
    converter.convert_columns(&columns)
}

fn reduce(
    batch: &RecordBatch,
    converter: &RowConverter,
    key: &[usize],
) -> Result<Reduced, arrow::error::ArrowError> {
    let rows = key_rows(converter, batch, key)?;
    let op = batch.schema().index_of(OP_COLUMN).ok().and_then(|i| {
        batch
            .column(i)
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .cloned()
    });
    let op_of = |i: usize| -> Option<&str> {
        op.as_ref()
            .and_then(|a| (!a.is_null(i)).then(|| a.value(i)))
    };
    let n = batch.num_rows();
    // A delete whose key is NULL names no row (its key was not in the change).
    let null_key = |i: usize| key.iter().any(|&k| batch.column(k).is_null(i));
    let start = (0..n)
        .rev()
        .find(|&i| op_of(i) == Some("t"))
        .map_or(0, |t| t + 1);
    let truncate = start > 0;
    let mut keys = HashSet::new();
    let mut keep: Vec<u32> = Vec::new();
    for i in (start..n).rev() {
        if op_of(i) == Some("d") && null_key(i) {
            continue;
        }
        if keys.insert(rows.row(i).as_ref().to_vec()) && op_of(i) != Some("d") {
            keep.push(u32::try_from(i).unwrap_or(u32::MAX));
        }
    }
    keep.reverse();
    let keep = take_record_batch(batch, &UInt32Array::from(keep))?;
    if let Ok(i) = keep.schema().index_of(UNCHANGED_COLUMN)
        && keep.column(i).null_count() < keep.num_rows()
    {
        return Err(arrow::error::ArrowError::InvalidArgumentError(
            "a change did not carry the columns its _unchanged names (values stored out of line that an update left alone, under the source table's default replica identity): merging it would overwrite them with NULL; run ALTER TABLE ... REPLICA IDENTITY FULL on the source table, then reset the pipeline".into(),
        ));
    }
    Ok(Reduced {
        keep,
        keys,
        truncate,
    })
}

/// Write `batches` (rows of one partition, `partition`) as data files of `table`.
async fn write_files(
    table: &Table,
    partition: Option<PartitionKey>,
    batches: Vec<RecordBatch>,
    prefix: &str,
    started: &Started,
) -> iceberg::Result<Vec<DataFile>> {
    let metadata = table.metadata();
    let rolling = RollingFileWriterBuilder::new_with_default_file_size(
        ParquetWriterBuilder::new(
            super::parquet_properties()?,
            Arc::clone(metadata.current_schema()),
        ),
        table.file_io().clone(),
        LakeLocationGenerator::new(metadata).noting(started),
        DefaultFileNameGenerator::new(
            prefix.to_owned(),
            Some(uuid::Uuid::new_v4().simple().to_string()),
            DataFileFormat::Parquet,
        ),
    );
    let mut writer = DataFileWriterBuilder::new(rolling).build(partition).await?;
    for batch in batches {
        writer.write(batch).await?;
    }
    writer.close().await
}

impl IcebergSink {
    /// Merge a delivery's `rows` of namespace `ns` (source order, shaped to the table) into
    /// `table` by the columns `key` (see the module docs); `summary` and the landed property
    /// go in the same commit. Returns the files written and the rows the delivery added.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn merge(
        &self,
        ns: &str,
        table: &Table,
        arrow: &SchemaRef,
        rows: &[RecordBatch],
        key: &[String],
        summary: HashMap<String, String>,
        first: BatchId,
        last: BatchId,
        started: &Started,
    ) -> Result<(u64, u64, Table), SinkError> {
        let err = |e: iceberg::Error| self.iceberg_err(ns, e);
        let arrow_err = |e: arrow::error::ArrowError| {
            err(iceberg::Error::new(
                ErrorKind::DataInvalid,
                format!("cannot merge by key: {e}"),
            ))
        };
        let mut indices = Vec::with_capacity(key.len());
        let mut fields = Vec::with_capacity(key.len());
        for column in key {
            let Ok(i) = arrow.index_of(column) else {
                return Err(SinkError::Config {
                    sink: format!("{}.{ns}", self.namespace.to_url_string()),
                    message: format!(
                        "`primary_key` column `{column}` is not a column of the table, so its rows cannot be merged by key"
                    ),
                });
            };
            indices.push(i);
            fields.push(SortField::new(arrow.field(i).data_type().clone()));
        }
        let converter = RowConverter::new(fields).map_err(arrow_err)?;
        let batch = concat_batches(arrow, rows).map_err(arrow_err)?;
        let reduced = reduce(&batch, &converter, &indices).map_err(arrow_err)?;
        let metadata = table.metadata();
        if metadata.format_version() != FormatVersion::V2 {
            return Err(err(iceberg::Error::new(
                ErrorKind::FeatureUnsupported,
                "merge_by_key rewrites format v2 tables only",
            )));
        }
        let current = metadata.current_snapshot().cloned();
        let live = match &current {
            Some(current) => match live_files(table, current).await.map_err(err)? {
                Some(live) => Some(live),
                None => {
                    return Err(err(iceberg::Error::new(
                        ErrorKind::FeatureUnsupported,
                        "the table has delete files, which merge_by_key does not rewrite",
                    )));
                }
            },
            None => None,
        };
        // Which live files lose rows, and what they keep.
        let spec = metadata.default_partition_spec();
        if let Some(live) = &live
            && live
                .entries
                .iter()
                .any(|l| live.manifests[l.manifest].partition_spec_id != spec.spec_id())
        {
            return Err(err(iceberg::Error::new(
                ErrorKind::FeatureUnsupported,
                "the table holds data files of an earlier partition spec, which merge_by_key does not rewrite (its partitioning changed); write it anew under the current layout",
            )));
        }
        let schema = metadata.current_schema();
        let mut replaced: Vec<&Live> = Vec::new();
        let mut written: Vec<DataFile> = Vec::new();
        let result: iceberg::Result<()> = async {
            if let Some(live) = &live {
                for l in &live.entries {
                    if reduced.truncate {
                        replaced.push(l);
                        continue;
                    }
                    if reduced.keys.is_empty() {
                        break;
                    }
                    let path = l.entry.file_path();
                    let batches = read_adapted(table, path, arrow).await.map_err(|m| {
                        iceberg::Error::new(
                            ErrorKind::DataInvalid,
                            format!("cannot read data file {path} to merge: {m}"),
                        )
                    })?;
                    let mut kept = Vec::with_capacity(batches.len());
                    let mut dropped = false;
                    for b in batches {
                        let rows = key_rows(&converter, &b, &indices).map_err(to_iceberg)?;
                        let mask: BooleanArray = (0..b.num_rows())
                            .map(|i| Some(!reduced.keys.contains(rows.row(i).as_ref())))
                            .collect();
                        dropped |= mask.true_count() < b.num_rows();
                        let b = filter_record_batch(&b, &mask).map_err(to_iceberg)?;
                        if b.num_rows() > 0 {
                            kept.push(b);
                        }
                    }
                    if !dropped {
                        continue;
                    }
                    replaced.push(l);
                    if !kept.is_empty() {
                        let partition = (!spec.is_unpartitioned()).then(|| {
                            PartitionKey::new(
                                spec.as_ref().clone(),
                                Arc::clone(schema),
                                l.entry.data_file().partition().clone(),
                            )
                        });
                        written
                            .extend(write_files(table, partition, kept, "merge", started).await?);
                    }
                }
            }
            if reduced.keep.num_rows() > 0 {
                let mut writer = self.writer(table, first, last, started).await?;
                writer.write(reduced.keep.clone()).await?;
                written.extend(writer.close().await?);
            }
            Ok(())
        }
        .await;
        let added_rows = reduced.keep.num_rows() as u64;
        let files = written.len() as u64;
        let committed = match (result, &current, &live) {
            (Err(e), _, _) => {
                // Every file started, also those a failed write left half written.
                discard(table, &started.take()).await;
                return Err(err(e));
            }
            (Ok(()), Some(current), Some(live)) => {
                self.overwrite(ns, table, current, live, &replaced, written, summary, last)
                    .await?
            }
            // A table with no snapshot yet: the rows are appended.
            (Ok(()), _, _) => self.append(ns, table, written, summary, last).await?,
        };
        Ok((files, added_rows, committed))
    }
}

fn to_iceberg(e: arrow::error::ArrowError) -> iceberg::Error {
    iceberg::Error::new(ErrorKind::DataInvalid, format!("cannot merge by key: {e}"))
}
