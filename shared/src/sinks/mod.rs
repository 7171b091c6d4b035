//! Destinations: where committed WAL batches are delivered.
//!
//! A destination receives committed batches in id order, each with its stable WAL batch id,
//! and makes the delivery idempotent by that id: an exactly-once destination records which
//! ids landed atomically with the data, and skips them when a crash makes the pipeline
//! deliver them again (see `docs/commit-protocol.md`). The pipeline acknowledges delivered
//! batches in the state store, and only then reclaims them from the WAL.
//!
//! This build delivers to the Iceberg destinations ([`iceberg`]): `Duckdb` (a local
//! warehouse in the Hadoop layout, read by DuckDB's `iceberg_scan` and PyIceberg),
//! `SkipprLake` (a local warehouse, each table's current metadata recorded in a catalog
//! store) and `AthenaIceberg` (an `s3://` warehouse, each table registered in Glue with its
//! current metadata as the `metadata_location` parameter, swapped with Glue's `VersionId`
//! lock; see [`iceberg::glue`]).
//! The `Postgres` destination ([`postgres`]) writes one PostgreSQL table per namespace,
//! exactly once by a transaction per delivery; the overwrite-on-retry family is [`files`].

pub mod deadletter;
pub mod error;
pub mod files;
pub mod iceberg;
pub mod memory;
pub mod postgres;
pub mod sink;

use std::path::PathBuf;

pub use error::SinkError;
pub use sink::{CommitCheck, Delivered, ReadBatch, Sink};

pub use crate::config::validate::{LakeCatalog, LakeLocation};
use crate::config::validate::{Maintenance, ValidatedPipeline};

impl LakeLocation {
    /// The warehouse directory of a `file://` warehouse.
    pub fn warehouse_dir(&self) -> Option<PathBuf> {
        self.warehouse
            .starts_with("file:")
            .then(|| iceberg::storage::local_path(&self.warehouse))
    }

    /// The catalog of this location: its file I/O and pointer. For Glue this loads the AWS
    /// configuration (no request is sent); for DynamoDB it also checks that the table exists
    /// (one `DescribeTable`).
    ///
    /// `aws` is the caller's AWS handle, when it has one: clients are then built from it (the
    /// connector's region applied), so its request counter sees the sink's requests too.
    pub fn catalog(
        &self,
        sink: &str,
        aws: Option<&crate::aws::Aws>,
    ) -> Result<iceberg::catalog::FileCatalog<iceberg::catalog::LakePointer>, SinkError> {
        use iceberg::catalog::{FileCatalog, HadoopPointer, LakePointer, StorePointer};
        let dir = || iceberg::storage::local_path(&self.warehouse);
        let aws_of = |region: Option<&str>| match (aws, region) {
            (Some(aws), Some(region)) => Ok(aws.with_region(region)),
            (Some(aws), None) => Ok(aws.clone()),
            (None, region) => crate::aws::Aws::load(region).map_err(|source| SinkError::Aws {
                sink: sink.to_owned(),
                source,
            }),
        };
        Ok(match &self.catalog {
            LakeCatalog::Hadoop => FileCatalog::at(
                self.warehouse.clone(),
                iceberg::storage::durable_file_io(),
                LakePointer::new(HadoopPointer),
            ),
            LakeCatalog::Store { name } => FileCatalog::at(
                self.warehouse.clone(),
                iceberg::storage::durable_file_io(),
                LakePointer::new(StorePointer::embedded(dir(), name)),
            ),
            LakeCatalog::Dynamo {
                table,
                region,
                files,
            } => {
                let aws = aws_of(region.as_deref())?;
                // The pointers in DynamoDB, the files where `object_store` says.
                let files_aws = match files {
                    Some(access) => aws.for_object_store(access),
                    None => aws.clone(),
                };
                let store = crate::state::DynamoStore::open(&aws, table).map_err(|source| {
                    SinkError::Catalog {
                        sink: sink.to_owned(),
                        source: Box::new(source),
                    }
                })?;
                FileCatalog::at(
                    self.warehouse.clone(),
                    iceberg::s3::s3_file_io(&files_aws, None),
                    LakePointer::new(StorePointer::shared(
                        std::sync::Arc::new(store),
                        format!("DynamoDB table '{table}'"),
                        &self.warehouse,
                    )),
                )
                .with_aws(files_aws)
            }
            LakeCatalog::Glue { region, catalog_id } => {
                let aws = aws_of(region.as_deref())?;
                let glue = iceberg::glue::SdkGlue::new(&aws, catalog_id.clone());
                FileCatalog::at(
                    self.warehouse.clone(),
                    iceberg::s3::s3_file_io(&aws, None),
                    LakePointer::new(iceberg::glue::GluePointer::new(std::sync::Arc::new(glue))),
                )
                .with_aws(aws)
            }
        })
    }
}

/// The pipeline's destination, opened, or `None` when it has none (the WAL is the dataset).
pub fn open(pipeline: &ValidatedPipeline) -> Result<Option<iceberg::IcebergSink>, SinkError> {
    open_with_aws(pipeline, None)
}

/// [`open`], building any AWS client from `aws` (see [`LakeLocation::catalog`]).
pub fn open_with_aws(
    pipeline: &ValidatedPipeline,
    aws: Option<&crate::aws::Aws>,
) -> Result<Option<iceberg::IcebergSink>, SinkError> {
    let Some(destination) = &pipeline.destination else {
        return Ok(None);
    };
    let location = &destination.location;
    let identity = pipeline.store.partition.clone();
    let policy = maintenance_policy(&destination.maintenance);
    let catalog = location.catalog(&destination.name, aws)?;
    match &location.catalog {
        LakeCatalog::Glue { .. } => {
            tracing::info!(sink = %destination.name, warehouse = %location.warehouse, database = %location.namespace, "Delivering to Iceberg tables on S3 registered in Glue (the database is created when missing).");
        }
        LakeCatalog::Dynamo { table, .. } => {
            tracing::info!(sink = %destination.name, warehouse = %location.warehouse, catalog_table = %table, "Delivering to Iceberg tables on S3 whose pointers are items in DynamoDB.");
        }
        LakeCatalog::Hadoop | LakeCatalog::Store { .. } => {}
    }
    let key_source = match &pipeline.source.connector {
        crate::config::connectors::SourceConnector::Postgres(c) if pipeline.write.source_keys => {
            Some(
                crate::sources::postgres::PostgresSourceOptions::from_config(c)
                    .map_err(postgres::from_source)?,
            )
        }
        _ => None,
    };
    iceberg::IcebergSink::with_catalog(catalog, &location.namespace, identity).map(|sink| {
        Some(
            sink.with_layout(destination.layout.clone())
                .with_maintenance(policy)
                .with_policies(pipeline.write.clone(), key_source),
        )
    })
}

/// The pipeline's destination of any family, opened: a [`postgres::PostgresSink`], an
/// Iceberg sink ([`open_with_aws`]) or an overwrite-on-retry one ([`files::FileSink`]); `None`
/// without a destination.
pub fn open_any(
    pipeline: &ValidatedPipeline,
    aws: Option<&crate::aws::Aws>,
) -> Result<Option<Box<dyn Sink>>, SinkError> {
    if let Some(sink) = postgres::PostgresSink::open(pipeline)? {
        return Ok(Some(Box::new(sink)));
    }
    if let Some(sink) = files::FileSink::open(pipeline, aws)? {
        return Ok(Some(Box::new(sink)));
    }
    Ok(open_with_aws(pipeline, aws)?.map(|s| Box::new(s) as Box<dyn Sink>))
}

/// The maintenance policy of an Iceberg sink: its settings over the defaults (see
/// [`iceberg::maintain::Policy`]).
pub fn maintenance_policy(settings: &Maintenance) -> iceberg::maintain::Policy {
    let defaults = iceberg::maintain::Policy::default();
    iceberg::maintain::Policy {
        auto: settings.auto.unwrap_or(defaults.auto),
        retain_last: settings.retain_last.unwrap_or(defaults.retain_last),
        max_snapshot_age: settings
            .max_snapshot_age
            .unwrap_or(defaults.max_snapshot_age),
        target_file_size: settings
            .target_file_size
            .unwrap_or(defaults.target_file_size),
        compact_min_files: settings
            .compact_min_files
            .unwrap_or(defaults.compact_min_files),
        orphan_min_age: settings.orphan_min_age.unwrap_or(defaults.orphan_min_age),
        retain_metadata_versions: settings
            .retain_metadata_versions
            .unwrap_or(defaults.retain_metadata_versions),
    }
}
