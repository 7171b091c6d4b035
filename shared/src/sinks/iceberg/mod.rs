//! Iceberg destinations: committed WAL batches -> Parquet data files -> Iceberg v2 snapshots.
//!
//! # Exactly once
//!
//! Every commit this sink makes to a table records, atomically with the data:
//!
//! - in the snapshot summary: `skippr.pipeline` (the pipeline's identity,
//!   `{tenant}#{workspace}#{pipeline}`), `skippr.first-batch-id` and `skippr.last-batch-id`
//!   (the range of WAL batch ids whose rows for this table the snapshot adds);
//! - in the table properties: `skippr.landed.<identity>` = the last batch id. Properties
//!   survive snapshot expiry, so the record outlives the snapshots that made it.
//!
//! Before writing, [`IcebergSink::deliver`] reads both for each table and skips every batch
//! at or below the highest id found: a batch that landed before a crash (after the Iceberg
//! commit, before the acknowledgement in the state store) is never written twice. Batches
//! are delivered in id order and a commit covers a contiguous id range, so "at or below the
//! highest landed id" is exactly "landed". One writer per pipeline (the writer lease) makes
//! that check race-free; commits of other writers to the same table (another pipeline,
//! a reader's maintenance) are compare-and-swap conflicts, retried on fresh metadata.
//!
//! Only data parts ([`crate::wal::PartKind::Data`]) become rows of tables; the bookkeeping parts
//! (rejected records, replayed files) are told by their kind, not by their name's shape.
//!
//! # What is ours and what is iceberg-rust's
//!
//! iceberg-rust 0.10 gives the spec types, Parquet writing with column statistics,
//! manifests, and the append transaction. Ours: the [`catalog`] (Hadoop layout with
//! `version-hint.text`; iceberg-rust has none; the same catalog over Glue in [`glue`]),
//! [`storage`] (local files fsynced before the metadata that references them), [`s3`] (S3
//! objects through our own SDK client), and [`schema`] (our schema -> Iceberg with stable field
//! ids; type promotion, which iceberg-rust's `UpdateSchemaAction` cannot do, is committed as
//! a new schema through our catalog), and [`maintain`] (snapshot expiry, compaction,
//! deleting unreferenced files; run after commits once a threshold is crossed).

pub mod catalog;
pub mod fanout;
pub mod glue;
pub mod layout;
pub mod location;
pub mod maintain;
pub mod merge;
mod replace;
pub mod s3;
pub mod schema;
pub mod storage;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{DataFileFormat, Schema as IcebergSchema};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::{DataFileWriter, DataFileWriterBuilder};
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::DefaultFileNameGenerator;
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent, TableRequirement, TableUpdate};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use self::catalog::{FileCatalog, HadoopPointer, LakePointer};
use self::fanout::{BoundedFanout, WriterLimits};
use self::location::{LakeLocationGenerator, Started};
use super::SinkError;
use super::sink::{CommitCheck, ReadBatch, Sink};
use crate::schema::PipelineSchema;
use crate::wal::{BatchId, BatchMeta};

/// Snapshot summary key: the identity of the pipeline that made the snapshot.
pub const SUMMARY_PIPELINE: &str = "skippr.pipeline";
/// Snapshot summary key: the first WAL batch id the snapshot covers.
pub const SUMMARY_FIRST_BATCH: &str = "skippr.first-batch-id";
/// Snapshot summary key: the last WAL batch id the snapshot covers.
pub const SUMMARY_LAST_BATCH: &str = "skippr.last-batch-id";
/// Table property prefix: `skippr.landed.<identity>` = last landed WAL batch id.
pub const PROPERTY_LANDED_PREFIX: &str = "skippr.landed.";

/// Names of the failpoints of a delivery.
pub use crate::failpoint::sink as failpoint;

fn failpoint(name: &'static str) -> Result<(), SinkError> {
    if crate::failpoint::check(name) {
        return Err(SinkError::Failpoint { name });
    }
    Ok(())
}

pub use super::sink::Delivered;

type Builder =
    DataFileWriterBuilder<ParquetWriterBuilder, LakeLocationGenerator, DefaultFileNameGenerator>;
type Writer = DataFileWriter<ParquetWriterBuilder, LakeLocationGenerator, DefaultFileNameGenerator>;

/// The data files being written to one table: one writer, or one per partition (bounded).
enum TableWriter {
    Unpartitioned(Box<Writer>),
    Partitioned(
        Box<BoundedFanout<Builder>>,
        Box<RecordBatchPartitionSplitter>,
    ),
}

impl TableWriter {
    async fn write(&mut self, batch: RecordBatch) -> iceberg::Result<()> {
        match self {
            TableWriter::Unpartitioned(w) => w.write(batch).await,
            TableWriter::Partitioned(w, splitter) => {
                for (key, rows) in splitter.split(&batch)? {
                    w.write(key, rows).await?;
                }
                Ok(())
            }
        }
    }

    async fn close(self) -> iceberg::Result<Vec<iceberg::spec::DataFile>> {
        match self {
            TableWriter::Unpartitioned(mut w) => w.close().await,
            TableWriter::Partitioned(w, _) => w.close().await,
        }
    }
}

/// A table being written in one delivery.
struct Open {
    table: Table,
    landed: u64,
    arrow: SchemaRef,
    writer: Option<TableWriter>,
    rows: u64,
    /// `merge_by_key`'s key columns; `None`: appended.
    key: Option<Vec<String>>,
    /// The rows to merge, in source order (with a key).
    pending: Vec<RecordBatch>,
    /// The data files this delivery started in the table.
    started: Started,
}

/// Iceberg tables on a local warehouse (the `Duckdb` and `SkipprLake` sinks) or on S3 and
/// registered in Glue (the `AthenaIceberg` sink).
pub struct IcebergSink {
    catalog: Arc<FileCatalog<LakePointer>>,
    namespace: NamespaceIdent,
    identity: String,
    layout: layout::Layout,
    runtime: tokio::runtime::Runtime,
    maintenance: maintain::Policy,
    writer_limits: WriterLimits,
    /// The pipeline's write policies (`append` unless declared; `merge_by_key` merges;
    /// `replace_table` and `replace_partition` replace by whole reads, [`replace`]).
    policies: crate::config::validate::WritePolicies,
    /// The Postgres source whose tables' primary keys are the merge keys
    /// ([`crate::config::validate::WritePolicies::source_keys`]).
    key_source: Option<crate::sources::postgres::PostgresSourceOptions>,
}

impl std::fmt::Debug for IcebergSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcebergSink")
            .field("warehouse", &self.catalog.warehouse())
            .field("namespace", &self.namespace)
            .field("identity", &self.identity)
            .finish()
    }
}

impl IcebergSink {
    /// A sink writing tables `{warehouse}/{namespace}/{table}` in the Hadoop layout (the
    /// `Duckdb` sink) for the pipeline `identity`.
    pub fn hadoop(
        warehouse: PathBuf,
        namespace: &str,
        identity: String,
    ) -> Result<Self, SinkError> {
        Self::new(
            warehouse,
            namespace,
            identity,
            LakePointer::new(HadoopPointer),
        )
    }

    /// A sink writing tables `{warehouse}/{namespace}/{table}` whose current metadata is
    /// tracked by `pointer`.
    pub fn new(
        warehouse: PathBuf,
        namespace: &str,
        identity: String,
        pointer: LakePointer,
    ) -> Result<Self, SinkError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|source| SinkError::Io {
                path: warehouse.clone(),
                source,
            })?;
        Ok(IcebergSink {
            catalog: Arc::new(FileCatalog::new(
                warehouse,
                storage::durable_file_io(),
                pointer,
            )),
            namespace: NamespaceIdent::new(namespace.to_owned()),
            identity,
            layout: layout::Layout::default(),
            runtime,
            maintenance: maintain::Policy::default(),
            writer_limits: WriterLimits::default(),
            policies: crate::config::validate::WritePolicies::default(),
            key_source: None,
        })
    }

    /// A sink writing the tables of `catalog` (any warehouse and pointer, such as an `s3://`
    /// warehouse with the Glue pointer) in `namespace` for the pipeline `identity`.
    pub fn with_catalog(
        catalog: FileCatalog<LakePointer>,
        namespace: &str,
        identity: String,
    ) -> Result<Self, SinkError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|source| SinkError::Io {
                path: PathBuf::from(catalog.warehouse()),
                source,
            })?;
        Ok(IcebergSink {
            catalog: Arc::new(catalog),
            namespace: NamespaceIdent::new(namespace.to_owned()),
            identity,
            layout: layout::Layout::default(),
            runtime,
            maintenance: maintain::Policy::default(),
            writer_limits: WriterLimits::default(),
            policies: crate::config::validate::WritePolicies::default(),
            key_source: None,
        })
    }

    /// Bound the open partition writers of a delivery (see [`fanout`]).
    pub fn with_writer_limits(mut self, limits: WriterLimits) -> Self {
        self.writer_limits = limits;
        self
    }

    /// Apply the pipeline's write `policies` (validation checked that this sink can), with
    /// the Postgres source whose tables' keys merge when the policies take those.
    pub fn with_policies(
        mut self,
        policies: crate::config::validate::WritePolicies,
        key_source: Option<crate::sources::postgres::PostgresSourceOptions>,
    ) -> Self {
        self.policies = policies;
        self.key_source = key_source;
        self
    }

    /// Partition and sort the tables as `layout` says.
    pub fn with_layout(mut self, layout: layout::Layout) -> Self {
        self.layout = layout;
        self
    }

    /// The catalog (for queries and maintenance).
    pub fn catalog(&self) -> Arc<FileCatalog<LakePointer>> {
        Arc::clone(&self.catalog)
    }

    /// The Iceberg namespace the tables live in.
    pub fn namespace(&self) -> &NamespaceIdent {
        &self.namespace
    }

    /// The identifier of the table of one of the pipeline's namespaces.
    pub fn table_ident(&self, namespace: &str) -> TableIdent {
        TableIdent::new(self.namespace.clone(), namespace.to_owned())
    }

    fn landed_key(&self) -> String {
        format!("{PROPERTY_LANDED_PREFIX}{}", self.identity)
    }

    /// The highest WAL batch id of this pipeline that has landed in `table` (0 for none).
    pub fn landed_through(&self, table: &Table) -> u64 {
        landed_through(table.metadata(), &self.identity)
    }

    /// Run a future of this sink's on its runtime.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// Write the committed `batches` (ascending ids) to their tables, exactly once: parts
    /// that already landed are skipped (see the module docs). `read` reads a batch's parts
    /// from the WAL. Returns once every table commit is durable.
    pub fn deliver(
        &self,
        batches: &[BatchMeta],
        read: ReadBatch<'_>,
        schema: &PipelineSchema,
    ) -> Result<Delivered, SinkError> {
        self.deliver_guarded(batches, read, schema, &|_| Ok(()))
    }

    /// [`IcebergSink::deliver`], calling `before_commit` with the table's name right before
    /// each table commit: the pipeline proves there that the writer still holds its lease (a
    /// fenced state write), so a writer that stalled past its lease (and was replaced) stops
    /// before publishing anything. An error from it leaves that table untouched (its data
    /// files become orphans for maintenance) and ends the delivery.
    pub fn deliver_guarded(
        &self,
        batches: &[BatchMeta],
        read: ReadBatch<'_>,
        schema: &PipelineSchema,
        before_commit: CommitCheck<'_>,
    ) -> Result<Delivered, SinkError> {
        let Some(last) = batches.last().map(|b| b.id) else {
            return Ok(Delivered::default());
        };
        let first = batches.first().map_or(last, |b| b.id);
        // Under a change stream with no declared policy, the source tables' keys (on a
        // runtime of their own: this sink's has no socket I/O).
        let source_keys = match &self.key_source {
            Some(options) => crate::sources::postgres::reader::table_keys_blocking(options)
                .map_err(crate::sinks::postgres::from_source)?,
            None => BTreeMap::new(),
        };
        // The tables whose commit was not attempted yet, with the files started in each: when
        // the delivery fails (a full disk, a write error, a lost lease), nothing references
        // those files, so they are deleted (see `Started`). A table whose commit was attempted
        // keeps them: a commit that failed may still have landed (cleanup decides later).
        let mut unsettled: BTreeMap<String, (Table, Started)> = BTreeMap::new();
        let result = self.runtime.block_on(async {
            let mut delivered = Delivered::default();
            let namespaces: BTreeSet<&str> = batches
                .iter()
                .flat_map(|b| b.parts.iter())
                .filter(|p| p.rows > 0 && p.kind().is_data())
                .map(|p| p.namespace.as_str())
                .collect();
            let mut open: BTreeMap<String, Open> = BTreeMap::new();
            for ns in namespaces {
                let table = self.prepare_table(ns, schema).await?;
                let landed = self.landed_through(&table);
                let arrow = schema_to_arrow_schema(table.metadata().current_schema())
                    .map_err(|e| self.iceberg_err(ns, e))?;
                let key = self.policies.merge_key(ns, &source_keys).cloned();
                let started = Started::default();
                unsettled.insert(ns.to_owned(), (table.clone(), started.clone()));
                open.insert(
                    ns.to_owned(),
                    Open {
                        table,
                        landed,
                        arrow: Arc::new(arrow),
                        writer: None,
                        rows: 0,
                        key,
                        pending: Vec::new(),
                        started,
                    },
                );
            }
            for meta in batches {
                if !delivered.wants(meta, |ns| open.get(ns).map(|o| o.landed)) {
                    continue;
                }
                let parts = read(meta.id).map_err(|source| SinkError::Wal {
                    batch: meta.id,
                    source,
                })?;
                for part in parts {
                    if part.batch.num_rows() == 0 {
                        continue;
                    }
                    let Some(o) = open.get_mut(&part.namespace) else {
                        continue;
                    };
                    if meta.id.0 <= o.landed {
                        delivered.skipped_parts += 1;
                        delivered.skipped_rows += part.batch.num_rows() as u64;
                        continue;
                    }
                    let merging = o.key.is_some();
                    let aligned = crate::schema::adapt::adapt_batch(&part.batch, &o.arrow)
                        // A merge needs source order; its new rows are few.
                        .and_then(|b| if merging { Ok(b) } else { self.layout.sort(&b) })
                        .map_err(|source| SinkError::Align {
                            table: format!("{}.{}", self.namespace.to_url_string(), part.namespace),
                            batch: meta.id,
                            source,
                        })?;
                    if merging {
                        o.rows += aligned.num_rows() as u64;
                        o.pending.push(aligned);
                        continue;
                    }
                    if o.writer.is_none() {
                        o.writer = Some(
                            self.writer(&o.table, first, last, &o.started)
                                .await
                                .map_err(|e| self.iceberg_err(&part.namespace, e))?,
                        );
                    }
                    if let Some(writer) = o.writer.as_mut() {
                        o.rows += aligned.num_rows() as u64;
                        writer
                            .write(aligned)
                            .await
                            .map_err(|e| self.iceberg_err(&part.namespace, e))?;
                    }
                }
            }
            for (ns, o) in open {
                if let Some(key) = &o.key {
                    if o.pending.is_empty() {
                        continue;
                    }
                    let summary = HashMap::from([
                        (SUMMARY_PIPELINE.to_owned(), self.identity.clone()),
                        (
                            SUMMARY_FIRST_BATCH.to_owned(),
                            (o.landed + 1).max(first.0).to_string(),
                        ),
                        (SUMMARY_LAST_BATCH.to_owned(), last.0.to_string()),
                    ]);
                    before_commit(&ns)?;
                    // The merge deletes what it wrote when it fails before its commit.
                    unsettled.remove(&ns);
                    let (files, _, committed) = self
                        .merge(
                            &ns, &o.table, &o.arrow, &o.pending, key, summary, first, last,
                            &o.started,
                        )
                        .await?;
                    failpoint(failpoint::AFTER_TABLE_COMMIT)?;
                    self.after_commit(&committed).await;
                    delivered.files += files;
                    delivered.commits += 1;
                    delivered.rows += o.rows;
                    continue;
                }
                let Some(writer) = o.writer else {
                    continue;
                };
                let files = writer.close().await.map_err(|e| self.iceberg_err(&ns, e))?;
                // Every row handed to the writer must be in a data file before the commit
                // marks the batches landed.
                let in_files: u64 = files.iter().map(|f| f.record_count()).sum();
                if in_files != o.rows {
                    return Err(SinkError::RowsUnaccounted {
                        target: format!("Iceberg table `{}.{ns}`", self.namespace.to_url_string()),
                        first: BatchId((o.landed + 1).max(first.0)),
                        last,
                        expected: o.rows,
                        written: in_files,
                        skipped: 0,
                    });
                }
                failpoint(failpoint::AFTER_DATA_FILES)?;
                delivered.files += files.len() as u64;
                let summary = HashMap::from([
                    (SUMMARY_PIPELINE.to_owned(), self.identity.clone()),
                    (
                        SUMMARY_FIRST_BATCH.to_owned(),
                        (o.landed + 1).max(first.0).to_string(),
                    ),
                    (SUMMARY_LAST_BATCH.to_owned(), last.0.to_string()),
                ]);
                before_commit(&ns)?;
                unsettled.remove(&ns);
                let policy = self.policies.of(&ns);
                let committed = if policy.replaces() {
                    let partitions_only = policy == crate::config::WritePolicy::ReplacePartition;
                    self.replace(&ns, &o.table, files, summary, last, partitions_only)
                        .await?
                } else {
                    self.append(&ns, &o.table, files, summary, last).await?
                };
                failpoint(failpoint::AFTER_TABLE_COMMIT)?;
                self.after_commit(&committed).await;
                delivered.commits += 1;
                delivered.rows += in_files;
            }
            delivered.through = Some(last);
            Ok(delivered)
        });
        // A failpoint stands for a crash, which deletes nothing.
        if result.is_err() && !matches!(result, Err(SinkError::Failpoint { .. })) {
            self.runtime.block_on(async {
                for (table, started) in unsettled.values() {
                    maintain::compact::discard(table, &started.take()).await;
                }
            });
        }
        result
    }

    /// Append `files` to `table` in one snapshot with `summary`, setting the landed property
    /// to `last` in the same commit.
    async fn append(
        &self,
        ns: &str,
        table: &Table,
        files: Vec<iceberg::spec::DataFile>,
        summary: HashMap<String, String>,
        last: BatchId,
    ) -> Result<Table, SinkError> {
        let tx = Transaction::new(table);
        let tx = tx
            .update_table_properties()
            .set(self.landed_key(), last.0.to_string())
            .apply(tx)
            .map_err(|e| self.iceberg_err(ns, e))?;
        let tx = tx
            .fast_append()
            .with_check_duplicate(false)
            .add_data_files(files)
            .set_snapshot_properties(summary)
            .apply(tx)
            .map_err(|e| self.iceberg_err(ns, e))?;
        tx.commit(self.catalog.as_ref())
            .await
            .map_err(|e| self.iceberg_err(ns, e))
    }

    fn iceberg_err(&self, table: &str, source: iceberg::Error) -> SinkError {
        SinkError::Iceberg {
            table: format!("{}.{table}", self.namespace.to_url_string()),
            source: Box::new(source),
        }
    }

    /// Load the namespace's table (creating it when missing) and evolve its schema to hold
    /// the namespace schema.
    async fn prepare_table(&self, ns: &str, schema: &PipelineSchema) -> Result<Table, SinkError> {
        let ident = self.table_ident(ns);
        let fields = schema
            .namespaces
            .get(ns)
            .map(|n| n.fields.as_slice())
            .unwrap_or_default();
        // Another writer may create or evolve the table meanwhile: a lost race is retried on
        // the winner's version.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.prepare_table_once(ns, &ident, fields).await {
                Err(iceberg_error)
                    if attempt < PREPARE_ATTEMPTS
                        && matches!(
                            iceberg_error.kind(),
                            iceberg::ErrorKind::CatalogCommitConflicts
                                | iceberg::ErrorKind::TableAlreadyExists
                        ) =>
                {
                    tracing::debug!(table = %ident, error = %iceberg_error, "Preparing the table lost a race; reloading.");
                }
                Err(iceberg_error) => return Err(self.iceberg_err(ns, iceberg_error)),
                Ok(Err(sink_error)) => return Err(sink_error),
                Ok(Ok(table)) => return Ok(table),
            }
        }
    }

    /// One attempt of [`Self::prepare_table`]: an Iceberg error is returned as such, so a lost
    /// race can be told apart.
    async fn prepare_table_once(
        &self,
        ns: &str,
        ident: &TableIdent,
        fields: &[crate::schema::Field],
    ) -> iceberg::Result<Result<Table, SinkError>> {
        let catalog = self.catalog.as_ref();
        let table = if catalog.table_exists(ident).await? {
            catalog.load_table(ident).await?
        } else {
            if !catalog.namespace_exists(&self.namespace).await? {
                catalog
                    .create_namespace(&self.namespace, HashMap::new())
                    .await?;
            }
            let initial = match schema::initial_schema(fields) {
                Ok(initial) => initial,
                Err(e) => return Ok(Err(self.iceberg_err(ns, e))),
            };
            let creation = TableCreation::builder()
                .name(ns.to_owned())
                .schema(initial)
                .properties(HashMap::from([(
                    "write.parquet.compression-codec".to_owned(),
                    "zstd".to_owned(),
                )]))
                .build();
            catalog.create_table(&self.namespace, creation).await?
        };
        let current = table.metadata().current_schema();
        let evolved = match schema::evolved_schema(current, fields) {
            Ok(evolved) => evolved,
            Err(i) => {
                return Ok(Err(SinkError::IncompatibleColumn {
                    table: format!("{}.{ns}", self.namespace.to_url_string()),
                    column: i.column,
                    table_type: i.table_type,
                    data_type: i.data_type,
                }));
            }
        };
        let table = match evolved {
            None => table,
            Some(evolved) => self.evolve_schema(ident, &table, evolved).await?,
        };
        self.evolve_spec(ident, table).await.map(Ok)
    }

    /// Commit `evolved` as the table's new current schema.
    async fn evolve_schema(
        &self,
        ident: &TableIdent,
        table: &Table,
        evolved: Vec<iceberg::spec::NestedFieldRef>,
    ) -> iceberg::Result<Table> {
        let new_schema = IcebergSchema::builder().with_fields(evolved).build()?;
        tracing::info!(table = %ident, "Evolving the Iceberg table schema.");
        self.catalog
            .commit_updates(
                ident,
                vec![TableRequirement::CurrentSchemaIdMatch {
                    current_schema_id: table.metadata().current_schema_id(),
                }],
                vec![
                    TableUpdate::AddSchema { schema: new_schema },
                    TableUpdate::SetCurrentSchema { schema_id: -1 },
                ],
            )
            .await
    }

    /// Give the table the partition spec the layout asks for, if it has another.
    async fn evolve_spec(&self, ident: &TableIdent, table: Table) -> iceberg::Result<Table> {
        let metadata = table.metadata();
        let (desired, warnings) = self.layout.partition_spec(metadata.current_schema())?;
        for warning in warnings {
            tracing::warn!(table = %ident, "{warning}");
        }
        if layout::same_spec(metadata.default_partition_spec(), &desired) {
            return Ok(table);
        }
        tracing::info!(table = %ident, "Changing the Iceberg table's partition spec.");
        self.catalog
            .commit_updates(
                ident,
                vec![TableRequirement::DefaultSpecIdMatch {
                    default_spec_id: metadata.default_partition_spec_id(),
                }],
                vec![
                    TableUpdate::AddSpec { spec: desired },
                    TableUpdate::SetDefaultSpec { spec_id: -1 },
                ],
            )
            .await
    }

    async fn writer(
        &self,
        table: &Table,
        first: BatchId,
        last: BatchId,
        started: &Started,
    ) -> iceberg::Result<TableWriter> {
        let parquet = ParquetWriterBuilder::new(
            parquet_properties()?,
            Arc::clone(table.metadata().current_schema()),
        );
        let rolling = RollingFileWriterBuilder::new_with_default_file_size(
            parquet,
            table.file_io().clone(),
            LakeLocationGenerator::new(table.metadata()).noting(started),
            DefaultFileNameGenerator::new(
                format!("b{}-b{}", first.0, last.0),
                Some(uuid::Uuid::new_v4().simple().to_string()),
                DataFileFormat::Parquet,
            ),
        );
        let builder = DataFileWriterBuilder::new(rolling);
        let metadata = table.metadata();
        let spec = metadata.default_partition_spec();
        if spec.is_unpartitioned() {
            return Ok(TableWriter::Unpartitioned(Box::new(
                builder.build(None).await?,
            )));
        }
        let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(
            Arc::clone(metadata.current_schema()),
            Arc::clone(spec),
        )?;
        Ok(TableWriter::Partitioned(
            Box::new(BoundedFanout::new(builder, self.writer_limits)),
            Box::new(splitter),
        ))
    }
}

impl Sink for IcebergSink {
    fn location(&self) -> String {
        format!(
            "{}/{}",
            self.catalog.warehouse(),
            self.namespace.to_url_string()
        )
    }

    fn prepare(&self, namespaces: &[&str], schema: &PipelineSchema) -> Result<(), SinkError> {
        self.runtime.block_on(async {
            for ns in namespaces {
                self.prepare_table(ns, schema).await?;
            }
            Ok(())
        })
    }

    fn landed(&self, namespace: &str) -> Result<u64, SinkError> {
        let ident = self.table_ident(namespace);
        self.runtime.block_on(async {
            let catalog = self.catalog.as_ref();
            let exists = catalog
                .table_exists(&ident)
                .await
                .map_err(|e| self.iceberg_err(namespace, e))?;
            if !exists {
                return Ok(0);
            }
            let table = catalog
                .load_table(&ident)
                .await
                .map_err(|e| self.iceberg_err(namespace, e))?;
            Ok(self.landed_through(&table))
        })
    }

    fn landed_any(&self) -> Result<u64, SinkError> {
        self.runtime.block_on(async {
            let catalog = self.catalog.as_ref();
            let whole = |e| self.iceberg_err("*", e);
            if !catalog
                .namespace_exists(&self.namespace)
                .await
                .map_err(whole)?
            {
                return Ok(0);
            }
            let mut highest = 0;
            for ident in catalog.list_tables(&self.namespace).await.map_err(whole)? {
                let table = catalog
                    .load_table(&ident)
                    .await
                    .map_err(|e| self.iceberg_err(ident.name(), e))?;
                highest = highest.max(self.landed_through(&table));
            }
            Ok(highest)
        })
    }

    fn write(
        &self,
        batches: &[BatchMeta],
        read: ReadBatch<'_>,
        schema: &PipelineSchema,
        before_commit: CommitCheck<'_>,
    ) -> Result<Delivered, SinkError> {
        self.deliver_guarded(batches, read, schema, before_commit)
    }
}

/// Rows per Parquet row group (the arrow writer's default). Measured on the bench's 10M
/// events: 256k-row groups made the files 17% larger and did not lower peak memory reliably.
pub const ROW_GROUP_ROWS: usize = 1024 * 1024;

/// The most bytes a column chunk's dictionary may hold before the column's values are
/// written plain (zstd still compresses them). The writer's default, 1 MiB, kept interning
/// high-cardinality columns (ids, amounts, timestamps) for 131k values of every row group
/// before giving up, and the dictionary indices of such values compress worse than the values:
/// on the Postgres benchmark's 10M rows, 256 KiB made the lake 9% smaller (212 vs 234 MB) and
/// the pass ~6% less CPU; low-cardinality columns (codes, names, flags, days) keep their
/// dictionaries. On the nested events the lake is ~5% larger (19 vs 18 MB per 1M rows).
pub const DICTIONARY_PAGE_BYTES: usize = 256 * 1024;

/// How every data file is written: zstd level 1 (as small as level 3 on event data, and
/// faster), [`ROW_GROUP_ROWS`] rows per row group, dictionaries up to
/// [`DICTIONARY_PAGE_BYTES`].
pub fn parquet_properties() -> iceberg::Result<WriterProperties> {
    let zstd = ZstdLevel::try_new(1)
        .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::Unexpected, e.to_string()))?;
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(zstd))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_dictionary_page_size_limit(DICTIONARY_PAGE_BYTES)
        .build())
}

/// Attempts of preparing a table (load or create, evolve) when other writers win races.
const PREPARE_ATTEMPTS: u32 = 5;

/// Refuse `updates` when they add a snapshot of WAL batches that `current` shows already
/// landed: a snapshot whose summary names pipeline `P` and first batch `F`, on a table where
/// `P` landed through `F` or beyond. The catalog runs this on the version its
/// compare-and-swap is conditioned on, so two writers of one pipeline racing with the same
/// batches (a lost lease, a retried commit whose first attempt did land) cannot both land
/// them. The error is a non-retryable [`iceberg::ErrorKind::CatalogCommitConflicts`]: the
/// delivery fails, and the next one skips what landed.
pub fn check_not_landed(
    current: &iceberg::spec::TableMetadata,
    updates: &[TableUpdate],
) -> iceberg::Result<()> {
    for update in updates {
        let TableUpdate::AddSnapshot { snapshot } = update else {
            continue;
        };
        let props = &snapshot.summary().additional_properties;
        let (Some(identity), Some(first)) = (
            props.get(SUMMARY_PIPELINE),
            props
                .get(SUMMARY_FIRST_BATCH)
                .and_then(|v| v.parse::<u64>().ok()),
        ) else {
            continue;
        };
        let landed = landed_through(current, identity);
        if landed >= first {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::CatalogCommitConflicts,
                format!(
                    "WAL batches from {first} of pipeline {identity} already landed in this table (through batch {landed}): another writer of the pipeline committed them first; nothing was committed, and the next delivery skips them"
                ),
            )
            .with_retryable(false));
        }
    }
    Ok(())
}

/// The highest WAL batch id of the pipeline `identity` that has landed in the table of
/// `metadata`.
pub fn landed_through(metadata: &iceberg::spec::TableMetadata, identity: &str) -> u64 {
    let property = metadata
        .properties()
        .get(&format!("{PROPERTY_LANDED_PREFIX}{identity}"))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let summaries = metadata
        .snapshots()
        .filter_map(|s| {
            let props = &s.summary().additional_properties;
            if props.get(SUMMARY_PIPELINE).map(String::as_str) != Some(identity) {
                return None;
            }
            props.get(SUMMARY_LAST_BATCH)?.parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0);
    property.max(summaries)
}

#[cfg(test)]
mod partition_tests;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod properties_tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Encoding, PageType};
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::{DICTIONARY_PAGE_BYTES, parquet_properties};

    /// A column of distinct values stops interning once its dictionary passes
    /// [`DICTIONARY_PAGE_BYTES`] (well before the writer's 1 MiB default) and is written plain
    /// from there; a column of a few values keeps its dictionary.
    #[test]
    fn distinct_values_fall_back_to_plain_and_repeated_ones_keep_a_dictionary()
    -> Result<(), Box<dyn std::error::Error>> {
        // 8-byte values: under the default limit all 100k would stay in the dictionary.
        let rows = 100_000i64;
        assert!(8 * rows as usize > DICTIONARY_PAGE_BYTES && 8 * (rows as usize) < 1 << 20);
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("code", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows)),
                Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i % 7))),
            ],
        )?;
        let mut file = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut file, schema, Some(parquet_properties()?))?;
        writer.write(&batch)?;
        writer.close()?;
        let reader = SerializedFileReader::new(bytes::Bytes::from(file))?;
        let group = reader.get_row_group(0)?;
        // The encodings of each column's data pages (the dictionary page is PLAIN either way).
        let data_pages = |column: usize| -> Result<Vec<Encoding>, parquet::errors::ParquetError> {
            let mut encodings = Vec::new();
            for page in group.get_column_page_reader(column)? {
                let page = page?;
                if page.page_type() != PageType::DICTIONARY_PAGE {
                    encodings.push(page.encoding());
                }
            }
            Ok(encodings)
        };
        let (id, code) = (data_pages(0)?, data_pages(1)?);
        assert!(id.contains(&Encoding::PLAIN), "id data pages: {id:?}");
        assert!(
            !code.is_empty() && code.iter().all(|e| *e == Encoding::RLE_DICTIONARY),
            "code data pages: {code:?}"
        );
        Ok(())
    }
}
