//! SQL over the batches committed in pipelines' write-ahead logs, with DataFusion.
//!
//! [`QueryEngine::open`] reads each given pipeline's WAL (`<state dir>/wal`, or its prefix in
//! the WAL bucket with `WAL_STORAGE=s3`) without writing to it, so it is safe while a `sync`
//! runs, and registers one table per namespace:
//! `<pipeline>.<namespace>` (a DataFusion schema per pipeline). With a single pipeline its
//! tables can also be named by namespace alone.
//!
//! A namespace's batches may have been written under several schema versions. They are read as
//! the newest one, widened by columns only older versions have: see `docs/query.md`. Tables are
//! scanned batch by batch as the query asks for rows, so memory stays bounded by one WAL batch
//! plus what the query itself keeps (sorts, aggregates, the result).
//!
//! Statements that would change data (`INSERT`, `COPY`) are refused; `CREATE VIEW`, `SET`,
//! `SHOW TABLES` and `EXPLAIN` work.
//!
//! [`athena::AthenaEngine`] runs statements through Amazon Athena instead, over the Glue tables
//! of an `AthenaIceberg` sink, and returns the same [`QueryOutput`].

pub mod athena;
mod error;
mod files;
mod lake;
mod landed;
pub mod manage;
mod output;
pub mod s3_objects;
mod table;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::TryStreamExt as _;
use iceberg::Catalog as _;

use datafusion::catalog::{MemorySchemaProvider, SchemaProvider};
use datafusion::error::DataFusionError;
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::{SessionConfig, SessionContext};

pub use error::QueryError;
pub use output::{QueryOutput, QueryStream};

use crate::config::ValidatedPipeline;
use crate::config::validate::{Settings, StoreKind, WalLocation};
use crate::sinks::iceberg::catalog::{FileCatalog, LakePointer};
use crate::wal::{DiskWal, WalView};

/// The DataFusion catalog the pipelines' schemas are registered in.
const CATALOG: &str = "datafusion";

/// Runs SQL over the committed WAL batches of some pipelines.
pub struct QueryEngine {
    /// Shared with the [`QueryStream`]s, which outlive a statement's call.
    runtime: Arc<tokio::runtime::Runtime>,
    ctx: SessionContext,
    pipelines: Vec<PipelineWal>,
    /// The registered namespace tables: (pipeline, namespace).
    registered: Vec<(String, String)>,
    /// The same, as `pipeline.namespace`, sorted.
    tables: Vec<String>,
}

/// One pipeline's WAL snapshot, and its Iceberg or `File` destination if it has one.
struct PipelineWal {
    name: String,
    wal: Arc<dyn WalView>,
    /// Its write policies: a namespace replaced by whole reads shows its landed table only.
    write: crate::config::validate::WritePolicies,
    lake: Option<Arc<LakeSource>>,
    files: Option<files::FilesSource>,
}

/// Where a pipeline's landed tables are.
struct LakeSource {
    catalog: Arc<FileCatalog<LakePointer>>,
    namespace: iceberg::NamespaceIdent,
    identity: String,
}

impl std::fmt::Debug for QueryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryEngine")
            .field("tables", &self.tables)
            .finish_non_exhaustive()
    }
}

impl QueryEngine {
    /// Register `<pipeline>.<namespace>` for every namespace in the committed WAL of each given
    /// pipeline, and in its destination. A pipeline that never ran has no tables. `settings`
    /// say where the pipelines' schemas are saved (an overwrite-on-retry destination's files
    /// are read with them).
    ///
    /// # Errors
    ///
    /// [`QueryError::Wal`] when a WAL cannot be read (corrupt, unreadable, S3 unreachable),
    /// [`QueryError::Aws`] when an S3 WAL needs an AWS configuration that cannot be loaded,
    /// [`QueryError::Runtime`].
    pub fn open(
        settings: &Settings,
        pipelines: &[&ValidatedPipeline],
    ) -> Result<QueryEngine, QueryError> {
        let mut wals = Vec::with_capacity(pipelines.len());
        let mut aws: Option<crate::aws::Aws> = None;
        for pipeline in pipelines {
            let wal_error = |source| QueryError::Wal {
                pipeline: pipeline.name.clone(),
                source,
            };
            let wal: Arc<dyn WalView> = match &pipeline.wal {
                WalLocation::Disk { dir } => {
                    Arc::new(DiskWal::open_read_only(dir).map_err(wal_error)?)
                }
                WalLocation::S3 { bucket, prefix } => {
                    let aws = match &aws {
                        Some(aws) => aws.clone(),
                        None => {
                            let loaded = crate::aws::Aws::load_with_fallback(
                                pipeline.aws.fallback_region.as_deref(),
                            )
                            .map_err(|e| QueryError::Aws {
                                pipeline: pipeline.name.clone(),
                                message: e.to_string(),
                            })?;
                            aws.insert(loaded).clone()
                        }
                    };
                    Arc::new(s3_wal_view(pipeline, bucket, prefix, &aws)?)
                }
            };
            let lake = lake_source(pipeline)?;
            let files = files::files_source(settings, pipeline)?;
            wals.push(PipelineWal {
                name: pipeline.name.clone(),
                wal,
                write: pipeline.write.clone(),
                lake,
                files,
            });
        }
        // One worker per core: the landed Parquet files of a lake table are scanned in
        // parallel (WAL tables stream in one partition either way).
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_time()
            .build()
            .map_err(QueryError::Runtime)?;
        let mut session = SessionConfig::new()
            .with_information_schema(true)
            .with_target_partitions(threads);
        if let [only] = wals.as_slice() {
            session = session.with_default_catalog_and_schema(CATALOG, &only.name);
        }
        let ctx = SessionContext::new_with_config(session);
        // The landed files on S3 are read through the lake catalog's file I/O, or an S3
        // destination's own client (its region and endpoint).
        for pipeline in &wals {
            let store: Option<(&str, &str, Arc<s3_objects::FileIoObjects>)> =
                match (&pipeline.lake, &pipeline.files) {
                    (Some(lake), _) => lake
                        .catalog
                        .warehouse()
                        .strip_prefix("s3://")
                        .and_then(|rest| rest.split('/').next())
                        .map(|bucket| {
                            let objects = s3_objects::FileIoObjects::new(
                                bucket.to_owned(),
                                lake.catalog.file_io().clone(),
                            );
                            ("warehouse", bucket, Arc::new(objects))
                        }),
                    (None, Some(files)) => files
                        .s3
                        .as_ref()
                        .map(|(bucket, store)| ("destination", bucket.as_str(), Arc::clone(store))),
                    (None, None) => None,
                };
            let Some((what, bucket, store)) = store else {
                continue;
            };
            let url = datafusion::execution::object_store::ObjectStoreUrl::parse(format!(
                "s3://{bucket}"
            ))
            .map_err(|e| QueryError::Unsupported {
                pipeline: pipeline.name.clone(),
                reason: format!("the {what} bucket `{bucket}` is not a valid URL host: {e}"),
            })?;
            ctx.register_object_store(url.as_ref(), store as _);
        }
        let mut engine = QueryEngine {
            runtime: Arc::new(runtime),
            ctx,
            pipelines: wals,
            registered: Vec::new(),
            tables: Vec::new(),
        };
        engine.register()?;
        Ok(engine)
    }

    /// The tables, `pipeline.namespace`, sorted.
    pub fn tables(&self) -> Vec<String> {
        self.tables.clone()
    }

    /// Run one SQL statement and collect its result.
    ///
    /// # Errors
    ///
    /// [`QueryError::Sql`] with DataFusion's message for a statement that is not valid, names
    /// an unknown column or function, or fails while running; [`QueryError::TableNotFound`];
    /// [`QueryError::Scan`] when a WAL batch cannot be read.
    pub fn sql(&self, sql: &str) -> Result<QueryOutput, QueryError> {
        let options = SQLOptions::new()
            .with_allow_ddl(true)
            .with_allow_dml(false)
            .with_allow_statements(true);
        let result = self.runtime.block_on(async {
            let frame = self.ctx.sql_with_options(sql, options).await?;
            let schema = Arc::new(frame.schema().as_arrow().clone());
            let batches = frame.collect().await?;
            Ok::<_, DataFusionError>(QueryOutput { schema, batches })
        });
        result.map_err(|error| QueryError::from_datafusion(error, &self.tables))
    }

    /// Run one SQL statement and stream its result: batches are computed as the returned
    /// reader is read (each `next` runs the plan until its next batch), so a large result is
    /// never held whole here. The Python `Session.query()` hands this reader to pyarrow.
    ///
    /// # Errors
    ///
    /// As [`QueryEngine::sql`] for planning; errors while running come from the reader.
    pub fn sql_stream(&self, sql: &str) -> Result<QueryStream, QueryError> {
        let options = SQLOptions::new()
            .with_allow_ddl(true)
            .with_allow_dml(false)
            .with_allow_statements(true);
        let stream = self.runtime.block_on(async {
            let frame = self.ctx.sql_with_options(sql, options).await?;
            frame.execute_stream().await
        });
        let stream = stream.map_err(|error| QueryError::from_datafusion(error, &self.tables))?;
        Ok(QueryStream::new(
            Arc::clone(&self.runtime),
            stream,
            self.tables.clone(),
        ))
    }

    /// The namespaces `pipeline` has tables for, sorted.
    pub fn namespaces(&self, pipeline: &str) -> Vec<String> {
        let mut namespaces: Vec<String> = self
            .registered
            .iter()
            .filter(|(name, _)| name == pipeline)
            .map(|(_, namespace)| namespace.clone())
            .collect();
        namespaces.sort();
        namespaces
    }

    /// Read the WALs again, so batches committed (or reclaimed) since are seen, and new
    /// namespaces become tables. Session settings and views are kept.
    ///
    /// # Errors
    ///
    /// [`QueryError::Wal`]; the tables stay as they were.
    pub fn refresh(&mut self) -> Result<(), QueryError> {
        let mut refreshed = Vec::with_capacity(self.pipelines.len());
        for pipeline in &self.pipelines {
            let wal = pipeline.wal.refreshed().map_err(|source| QueryError::Wal {
                pipeline: pipeline.name.clone(),
                source,
            })?;
            refreshed.push(PipelineWal {
                name: pipeline.name.clone(),
                wal: Arc::from(wal),
                write: pipeline.write.clone(),
                lake: pipeline.lake.clone(),
                files: pipeline.files.clone(),
            });
        }
        let previous = std::mem::replace(&mut self.pipelines, refreshed);
        let result = self.register();
        if result.is_err() {
            self.pipelines = previous;
        }
        result
    }

    /// (Re)register one DataFusion schema per pipeline with one table per namespace. An
    /// existing schema is kept, so views created in it survive; its namespace tables are
    /// replaced.
    fn register(&mut self) -> Result<(), QueryError> {
        let built = build_tables(&self.runtime, &self.pipelines)?;
        let catalog = self.ctx.catalog(CATALOG).ok_or_else(|| {
            QueryError::Sql(DataFusionError::Internal(format!(
                "the default catalog `{CATALOG}` is missing"
            )))
        })?;
        let internal = |error| QueryError::from_datafusion(error, &[]);
        for (pipeline, tables) in built {
            let schema = match catalog.schema(&pipeline) {
                Some(schema) => schema,
                None => {
                    let schema: Arc<dyn SchemaProvider> = Arc::new(MemorySchemaProvider::new());
                    catalog
                        .register_schema(&pipeline, Arc::clone(&schema))
                        .map_err(internal)?;
                    schema
                }
            };
            for (old_pipeline, namespace) in &self.registered {
                if *old_pipeline == pipeline {
                    schema.deregister_table(namespace).map_err(internal)?;
                }
            }
            self.registered
                .retain(|(old_pipeline, _)| *old_pipeline != pipeline);
            for table in tables {
                schema
                    .deregister_table(&table.namespace)
                    .map_err(internal)?;
                schema
                    .register_table(table.namespace.clone(), table.table)
                    .map_err(internal)?;
                self.registered.push((pipeline.clone(), table.namespace));
            }
        }
        let mut names: Vec<String> = self
            .registered
            .iter()
            .map(|(pipeline, namespace)| format!("{pipeline}.{namespace}"))
            .collect();
        names.sort();
        self.tables = names;
        Ok(())
    }
}

/// Each pipeline's namespace tables, built before anything is registered so that a failure
/// leaves the engine as it was. The WALs were listed before this loads the landed tables, so
/// no table is older than the WAL listing it is combined with.
fn build_tables(
    runtime: &tokio::runtime::Runtime,
    pipelines: &[PipelineWal],
) -> Result<Vec<(String, Vec<table::NamespaceTable>)>, QueryError> {
    pipelines
        .iter()
        .map(|pipeline| {
            let lakes = match (&pipeline.lake, &pipeline.files) {
                (Some(lake), _) => runtime.block_on(load_lake(&pipeline.name, lake))?,
                (None, Some(files)) => {
                    runtime.block_on(files::load_files(&pipeline.name, files))?
                }
                (None, None) => BTreeMap::new(),
            };
            let replaced = |ns: &str| pipeline.write.of(ns).replaces();
            table::namespace_tables(&pipeline.name, &pipeline.wal, lakes, &replaced)
                .map(|tables| (pipeline.name.clone(), tables))
        })
        .collect()
}

/// A read-only view of the pipeline's S3 WAL, with the watermark read from the DynamoDB store
/// when that is the store (the embedded store is held open by a running writer: without it,
/// the view goes by the listing alone, see [`crate::wal::S3WalView`]).
fn s3_wal_view(
    pipeline: &ValidatedPipeline,
    bucket: &str,
    prefix: &str,
    aws: &crate::aws::Aws,
) -> Result<crate::wal::S3WalView, QueryError> {
    let wal_error = |source| QueryError::Wal {
        pipeline: pipeline.name.clone(),
        source,
    };
    let watermark = match &pipeline.store.kind {
        StoreKind::Dynamodb { table } => {
            let store = crate::state::DynamoStore::open(aws, table)
                .map_err(|source| wal_error(crate::wal::WalError::State { source }))?;
            Some(crate::wal::s3::WatermarkSource {
                store: Arc::new(store),
                partition: pipeline.store.partition.clone(),
            })
        }
        StoreKind::Embedded => None,
    };
    crate::wal::S3WalView::open(aws, bucket, prefix, watermark).map_err(wal_error)
}

/// The pipeline's Iceberg destination, if it has one this build can read.
fn lake_source(pipeline: &ValidatedPipeline) -> Result<Option<Arc<LakeSource>>, QueryError> {
    let Some(destination) = &pipeline.destination else {
        return Ok(None);
    };
    let location = &destination.location;
    let catalog =
        location
            .catalog(&destination.name, None)
            .map_err(|e| QueryError::Unsupported {
                pipeline: pipeline.name.clone(),
                reason: e.to_string(),
            })?;
    Ok(Some({
        Arc::new(LakeSource {
            catalog: Arc::new(catalog),
            namespace: iceberg::NamespaceIdent::new(location.namespace.clone()),
            identity: pipeline.store.partition.clone(),
        })
    }))
}

/// The landed tables of a pipeline: every table of the sink's namespace that holds batches of
/// this pipeline, by namespace name.
async fn load_lake(
    pipeline: &str,
    lake: &LakeSource,
) -> Result<BTreeMap<String, lake::LakePart>, QueryError> {
    let lake_error = |source: iceberg::Error| QueryError::Lake {
        pipeline: pipeline.to_owned(),
        source: Box::new(source),
    };
    let catalog = lake.catalog.as_ref();
    let mut parts = BTreeMap::new();
    for ident in catalog
        .list_tables(&lake.namespace)
        .await
        .map_err(lake_error)?
    {
        let table = catalog.load_table(&ident).await.map_err(lake_error)?;
        let landed = crate::sinks::iceberg::landed_through(table.metadata(), &lake.identity);
        if landed == 0 {
            continue;
        }
        let schema = iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
            .map_err(lake_error)?;
        let mut files = Vec::new();
        if table.metadata().current_snapshot().is_some() {
            let mut tasks = table
                .scan()
                .build()
                .map_err(lake_error)?
                .plan_files()
                .await
                .map_err(lake_error)?;
            while let Some(task) = tasks.try_next().await.map_err(lake_error)? {
                files.push(task.data_file_path().to_owned());
            }
        }
        // A table with a column undotted by the sink (`a%2Eb` for a key `a.b` beside a struct
        // `a`) may hold files written before the rename, under the key: DataFusion's scan
        // matches by name alone, so such a table is read with the fallback of `adapt`.
        let reader = if has_undotted(schema.fields()) {
            Some(Arc::new(iceberg_file_reader(pipeline, &table, &mut files)))
        } else {
            None
        };
        parts.insert(
            ident.name().to_owned(),
            lake::LakePart {
                landed,
                schema: Arc::new(schema),
                files,
                reader,
            },
        );
    }
    Ok(parts)
}

/// Whether any field of `fields`, at any depth, is an undotted name of the Iceberg sink
/// (see [`crate::sinks::iceberg::schema`]) with no field of its key beside it.
fn has_undotted(fields: &arrow::datatypes::Fields) -> bool {
    use arrow::datatypes::DataType;
    fields.iter().any(|f| {
        crate::schema::naming::dotted_key(f.name())
            .is_some_and(|key| !fields.iter().any(|g| *g.name() == key))
            || match f.data_type() {
                DataType::Struct(children) => has_undotted(children),
                DataType::List(item) | DataType::LargeList(item) => match item.data_type() {
                    DataType::Struct(children) => has_undotted(children),
                    _ => false,
                },
                _ => false,
            }
    })
}

/// A Parquet reader for the data `files` of an Iceberg `table` (turned into local paths when
/// local): each file read whole, its columns found by name or by the key of an undotted name.
fn iceberg_file_reader(
    pipeline: &str,
    table: &iceberg::table::Table,
    files: &mut [String],
) -> landed::FileReader {
    let bucket = files.first().and_then(|f| {
        f.strip_prefix("s3://")
            .or_else(|| f.strip_prefix("s3a://"))
            .and_then(|rest| rest.split('/').next())
            .map(str::to_owned)
    });
    let objects = match bucket {
        Some(bucket) => landed::Objects::S3 {
            store: Arc::new(s3_objects::FileIoObjects::new(
                bucket.clone(),
                table.file_io().clone(),
            )),
            bucket,
        },
        None => {
            for file in files.iter_mut() {
                *file = crate::sinks::iceberg::storage::local_path(file)
                    .to_string_lossy()
                    .into_owned();
            }
            landed::Objects::Local
        }
    };
    landed::FileReader {
        pipeline: pipeline.to_owned(),
        format: crate::config::connectors::OutputFormat::Parquet,
        glue_names: false,
        path_columns: Vec::new(),
        key_count: 0,
        partitions: std::collections::HashMap::new(),
        objects,
    }
}

/// `SELECT * FROM "<pipeline>"."<namespace>"`: one namespace's rows, as `skipprd df` and the
/// Python `Session.df()` read them (the landed table plus the WAL batches not landed yet, each
/// row once). Identifiers are quoted, so any name works.
pub fn table_sql(pipeline: &str, namespace: &str) -> String {
    let quote = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    format!("SELECT * FROM {}.{}", quote(pipeline), quote(namespace))
}
