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

pub mod deadletter;
pub mod error;
pub mod iceberg;
pub mod memory;
pub mod sink;

use std::path::{Path, PathBuf};

pub use error::SinkError;
pub use sink::{CommitCheck, Delivered, ReadBatch, Sink};

use crate::config::connectors::{ConnectorSet, SinkConnector};
use crate::config::validate::{Named, Settings, ValidatedPipeline};

/// Where an Iceberg sink's tables live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeLocation {
    /// The warehouse URI, no trailing `/`: `file:///absolute/dir` or `s3://bucket/prefix`.
    pub warehouse: String,
    /// The Iceberg namespace (a directory under the warehouse; the Glue database for
    /// `AthenaIceberg`).
    pub namespace: String,
    /// Where each table's current metadata is recorded.
    pub catalog: LakeCatalog,
}

/// How a lake sink records each table's current metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LakeCatalog {
    /// `Duckdb`: `metadata/vN.metadata.json` + `version-hint.text` in each table.
    Hadoop,
    /// `SkipprLake` on a `file://` warehouse: an item in the embedded catalog store of this
    /// name, in `{warehouse}/_skippr_catalog/{name}.redb`.
    Store {
        /// The store's name (`catalog_table`, default `catalog`).
        name: String,
    },
    /// `SkipprLake` on an `s3://` warehouse: an item in a DynamoDB table (a state-store
    /// table: keys `pk`, `sk`), partition `catalog#{warehouse}` (see
    /// [`iceberg::catalog::catalog_partition`]).
    Dynamo {
        /// The table (`catalog_table`, default the state store's table).
        table: String,
        /// The AWS region (`None`: the environment's).
        region: Option<String>,
    },
    /// `AthenaIceberg`: the Glue table of each Iceberg table (database = the namespace).
    Glue {
        /// The AWS region (`None`: the environment's).
        region: Option<String>,
        /// The Glue catalog id (`None`: the caller's account).
        catalog_id: Option<String>,
    },
}

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
            LakeCatalog::Dynamo { table, region } => {
                let aws = aws_of(region.as_deref())?;
                let store = crate::state::DynamoStore::open(&aws, table).map_err(|source| {
                    SinkError::Catalog {
                        sink: sink.to_owned(),
                        source: Box::new(source),
                    }
                })?;
                FileCatalog::at(
                    self.warehouse.clone(),
                    iceberg::s3::s3_file_io(&aws, None),
                    LakePointer::new(StorePointer::shared(
                        std::sync::Arc::new(store),
                        format!("DynamoDB table '{table}'"),
                        &self.warehouse,
                    )),
                )
                .with_aws(aws)
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

/// The default `table_namespace`.
pub const DEFAULT_TABLE_NAMESPACE: &str = "default";

/// The warehouse and namespace of a lake sink: `file://` paths resolved against `base_dir`
/// (the config file's directory) and then the working directory; `s3://` warehouses as
/// given. `store` is the state store, whose DynamoDB table keeps the pointers of a
/// `SkipprLake` on S3 unless `catalog_table` names another. Reads no files and calls no
/// service.
pub fn lake_location(
    sink: &Named<SinkConnector>,
    base_dir: &Path,
    store: &crate::config::validate::StoreKind,
) -> Result<Option<LakeLocation>, SinkError> {
    let config_err = |message: String| SinkError::Config {
        sink: sink.name.clone(),
        message,
    };
    let (warehouse, namespace, catalog) = match &sink.connector {
        SinkConnector::Duckdb(c) => (&c.warehouse, &c.table_namespace, LakeCatalog::Hadoop),
        SinkConnector::SkipprLake(c) => {
            use crate::config::connectors::ObjectStoreKind;
            let on_s3 = c.warehouse.starts_with("s3://");
            match (c.object_store, on_s3) {
                (Some(ObjectStoreKind::S3), false) => {
                    return Err(config_err(format!(
                        "`object_store: s3` needs an `s3://bucket/prefix` `warehouse`, got `{}`",
                        c.warehouse
                    )));
                }
                (Some(ObjectStoreKind::File), true) => {
                    return Err(config_err(format!(
                        "`object_store: file` needs a `file://` `warehouse`, got `{}`",
                        c.warehouse
                    )));
                }
                _ => {}
            }
            if on_s3 {
                return skipprlake_s3_location(c, store)
                    .map(Some)
                    .map_err(config_err);
            }
            let name = c
                .catalog_table
                .clone()
                .unwrap_or_else(|| "catalog".to_owned());
            if name.is_empty()
                || !name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
            {
                return Err(config_err(format!(
                    "`catalog_table` `{name}` must be letters, digits, `_` or `-` (it names a file)"
                )));
            }
            (
                &c.warehouse,
                &c.table_namespace,
                LakeCatalog::Store { name },
            )
        }
        SinkConnector::AthenaIceberg(c) => return glue_location(c).map(Some).map_err(config_err),
        _ => return Ok(None),
    };
    let Some(rest) = warehouse.strip_prefix("file://") else {
        return Err(config_err(format!(
            "`warehouse` must be a `file://` URI (e.g. `file://./lake`), got `{warehouse}`"
        )));
    };
    if rest.is_empty() {
        return Err(config_err("`warehouse` names no directory".to_owned()));
    }
    let path = Path::new(rest);
    let warehouse = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base_dir.join(path)
    };
    // Absolute, so that table locations written into Iceberg metadata are too (a relative
    // `--config` path makes `base_dir` relative).
    let warehouse = std::path::absolute(&warehouse).unwrap_or(warehouse);
    let warehouse = normalize(&warehouse);
    let namespace = table_namespace(namespace.as_deref()).map_err(config_err)?;
    Ok(Some(LakeLocation {
        warehouse: format!("file://{}", warehouse.display()),
        namespace,
        catalog,
    }))
}

/// The `table_namespace` (default [`DEFAULT_TABLE_NAMESPACE`]), checked: it names a
/// directory or key prefix.
fn table_namespace(namespace: Option<&str>) -> Result<String, String> {
    let namespace = namespace.unwrap_or(DEFAULT_TABLE_NAMESPACE).to_owned();
    if namespace.is_empty()
        || namespace.starts_with('.')
        || !namespace
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "`table_namespace` `{namespace}` must be letters, digits, `_` or `-` (it names a directory)"
        ));
    }
    Ok(namespace)
}

/// An `s3://bucket/prefix` warehouse without its trailing `/`; the error names `warehouse`.
fn s3_warehouse(warehouse: &str) -> Result<&str, String> {
    let trimmed = warehouse.trim_end_matches('/');
    match trimmed
        .strip_prefix("s3://")
        .map(|rest| rest.split('/').next().unwrap_or(""))
    {
        None => Err(format!(
            "`warehouse` must be an `s3://bucket/prefix` URI, got `{warehouse}`"
        )),
        Some(bucket) if bucket.len() < 3 => Err(format!(
            "`warehouse` `{warehouse}` names no S3 bucket (`s3://bucket/prefix`)"
        )),
        Some(_) => Ok(trimmed),
    }
}

/// The location of a `SkipprLake` sink on S3: its pointers in the DynamoDB table
/// `catalog_table`, else the state store's table. The error names the keys at fault.
fn skipprlake_s3_location(
    c: &crate::config::connectors::SkipprLakeSinkConfig,
    store: &crate::config::validate::StoreKind,
) -> Result<LakeLocation, String> {
    let warehouse = s3_warehouse(&c.warehouse)?;
    let table = match (&c.catalog_table, store) {
        (Some(table), _) => table.clone(),
        (None, crate::config::validate::StoreKind::Dynamodb { table }) => table.clone(),
        (None, crate::config::validate::StoreKind::Embedded) => {
            return Err(format!(
                "an `s3://` warehouse keeps its catalog pointers in DynamoDB, and the state store is the embedded one: set `catalog_table` to a DynamoDB table (create it with `skipprd store create`), or set `skippr.store` to `{{type: dynamodb, name: <table>}}` (`warehouse` `{}`)",
                c.warehouse
            ));
        }
    };
    if !(3..=255).contains(&table.len())
        || !table
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.'))
    {
        return Err(format!(
            "`catalog_table` `{table}` is not a DynamoDB table name (3 to 255 letters, digits, `_`, `-` or `.`)"
        ));
    }
    Ok(LakeLocation {
        warehouse: warehouse.to_owned(),
        namespace: table_namespace(c.table_namespace.as_deref())?,
        catalog: LakeCatalog::Dynamo {
            table,
            region: c.region.clone(),
        },
    })
}

/// The location of an `AthenaIceberg` sink; the error names the key at fault.
fn glue_location(
    c: &crate::config::connectors::AthenaIcebergSinkConfig,
) -> Result<LakeLocation, String> {
    let warehouse = s3_warehouse(&c.warehouse)?;
    if matches!(
        c.object_store,
        Some(crate::config::connectors::ObjectStoreKind::File)
    ) {
        return Err(
            "`object_store` must be `s3` for AthenaIceberg (its warehouse is in S3)".to_owned(),
        );
    }
    let database = &c.glue_database_name;
    if database.is_empty()
        || database.len() > 255
        || !database
            .chars()
            .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
    {
        return Err(format!(
            "`glue_database_name` `{database}` must be lowercase letters, digits or `_` (Athena's rule for database names)"
        ));
    }
    Ok(LakeLocation {
        warehouse: warehouse.to_owned(),
        namespace: database.clone(),
        catalog: LakeCatalog::Glue {
            region: c.region.clone(),
            catalog_id: c.catalog_id.clone(),
        },
    })
}

/// `a/./b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The pipeline's destination, opened, or `None` when it has none (the WAL is the dataset).
pub fn open(
    pipeline: &ValidatedPipeline,
    settings: &Settings,
    base_dir: &Path,
) -> Result<Option<iceberg::IcebergSink>, SinkError> {
    open_with_aws(pipeline, settings, base_dir, None)
}

/// [`open`], building any AWS client from `aws` (see [`LakeLocation::catalog`]).
pub fn open_with_aws(
    pipeline: &ValidatedPipeline,
    settings: &Settings,
    base_dir: &Path,
    aws: Option<&crate::aws::Aws>,
) -> Result<Option<iceberg::IcebergSink>, SinkError> {
    let Some(sink) = &pipeline.sink else {
        return Ok(None);
    };
    let Some(location) = lake_location(sink, base_dir, &settings.store)? else {
        return Err(SinkError::Config {
            sink: sink.name.clone(),
            message: format!(
                "connector `{}` cannot be delivered to by this build",
                sink.connector.type_name()
            ),
        });
    };
    let identity =
        crate::state::partition_key(&settings.tenant, &settings.workspace, &pipeline.name);
    let policy = maintenance_policy(sink)?;
    let layout = iceberg::layout::Layout::from_transform(&pipeline.transform);
    let catalog = location.catalog(&sink.name, aws)?;
    match &location.catalog {
        LakeCatalog::Glue { .. } => {
            tracing::info!(sink = %sink.name, warehouse = %location.warehouse, database = %location.namespace, "Delivering to Iceberg tables on S3 registered in Glue (the database is created when missing).");
        }
        LakeCatalog::Dynamo { table, .. } => {
            tracing::info!(sink = %sink.name, warehouse = %location.warehouse, catalog_table = %table, "Delivering to Iceberg tables on S3 whose pointers are items in DynamoDB.");
        }
        LakeCatalog::Hadoop | LakeCatalog::Store { .. } => {}
    }
    iceberg::IcebergSink::with_catalog(catalog, &location.namespace, identity)
        .map(|sink| Some(sink.with_layout(layout).with_maintenance(policy)))
}

/// The maintenance policy of an Iceberg sink: its settings over the defaults (see
/// [`iceberg::maintain::Policy`]).
pub fn maintenance_policy(
    sink: &Named<SinkConnector>,
) -> Result<iceberg::maintain::Policy, SinkError> {
    let mut policy = iceberg::maintain::Policy::default();
    let SinkConnector::Duckdb(c) = &sink.connector else {
        return Ok(policy);
    };
    let minutes = |m: u64| std::time::Duration::from_secs(m.saturating_mul(60));
    if let Some(auto) = c.auto_maintenance {
        policy.auto = auto;
    }
    if let Some(n) = c.snapshot_retain_last {
        if n == 0 {
            return Err(SinkError::Config {
                sink: sink.name.clone(),
                message: "`snapshot_retain_last` must be at least 1 (the current snapshot is always kept)".to_owned(),
            });
        }
        policy.retain_last = n as usize;
    }
    if let Some(m) = c.snapshot_max_age_minutes {
        policy.max_snapshot_age = minutes(m);
    }
    if let Some(mb) = c.compact_target_file_mb {
        if mb == 0 {
            return Err(SinkError::Config {
                sink: sink.name.clone(),
                message: "`compact_target_file_mb` must be at least 1".to_owned(),
            });
        }
        policy.target_file_size = mb.saturating_mul(1 << 20);
    }
    if let Some(n) = c.compact_min_files {
        policy.compact_min_files = n as usize;
    }
    if let Some(m) = c.orphan_min_age_minutes {
        policy.orphan_min_age = minutes(m);
    }
    if let Some(n) = c.metadata_retain_versions {
        policy.retain_metadata_versions = n;
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::connectors::DuckdbSinkConfig;
    use crate::config::validate::StoreKind;

    fn duckdb(warehouse: &str, ns: Option<&str>) -> Named<SinkConnector> {
        Named {
            name: "lake".into(),
            connector: SinkConnector::Duckdb(DuckdbSinkConfig {
                version: None,
                warehouse: warehouse.into(),
                table_namespace: ns.map(str::to_owned),
                auto_maintenance: None,
                snapshot_retain_last: None,
                snapshot_max_age_minutes: None,
                compact_target_file_mb: None,
                compact_min_files: None,
                orphan_min_age_minutes: None,
                metadata_retain_versions: None,
            }),
        }
    }

    #[test]
    fn relative_warehouses_resolve_against_the_config_dir() -> Result<(), SinkError> {
        let loc = lake_location(
            &duckdb("file://./lake/../wh", None),
            Path::new("/p"),
            &StoreKind::Embedded,
        )?;
        assert_eq!(
            loc,
            Some(LakeLocation {
                warehouse: "file:///p/wh".into(),
                namespace: "default".into(),
                catalog: LakeCatalog::Hadoop,
            })
        );
        let loc = lake_location(
            &duckdb("file:///abs/wh", Some("ns_1")),
            Path::new("/p"),
            &StoreKind::Embedded,
        )?;
        assert_eq!(
            loc.and_then(|l| l.warehouse_dir()),
            Some(PathBuf::from("/abs/wh"))
        );
        Ok(())
    }

    #[test]
    fn bad_warehouses_and_namespaces_are_named() {
        let err = lake_location(
            &duckdb("s3://b/x", None),
            Path::new("/p"),
            &StoreKind::Embedded,
        )
        .map(|_| ());
        assert!(
            matches!(err, Err(SinkError::Config { ref message, .. }) if message.contains("file://"))
        );
        let err = lake_location(
            &duckdb("file://./x", Some("a/b")),
            Path::new("/p"),
            &StoreKind::Embedded,
        )
        .map(|_| ());
        assert!(
            matches!(err, Err(SinkError::Config { ref message, .. }) if message.contains("a/b"))
        );
    }

    fn athena(warehouse: &str, database: &str) -> Named<SinkConnector> {
        Named {
            name: "lake".into(),
            connector: SinkConnector::AthenaIceberg(
                crate::config::connectors::AthenaIcebergSinkConfig {
                    version: None,
                    warehouse: warehouse.into(),
                    glue_database_name: database.into(),
                    athena_workgroup_name: None,
                    athena_results_s3_bucket: None,
                    region: Some("eu-west-1".into()),
                    catalog_id: None,
                    object_store: None,
                },
            ),
        }
    }

    #[test]
    fn athena_iceberg_locations_are_s3_with_a_glue_database() -> Result<(), SinkError> {
        let loc = lake_location(
            &athena("s3://bucket/lake/", "shop_1"),
            Path::new("/p"),
            &StoreKind::Embedded,
        )?;
        assert_eq!(
            loc,
            Some(LakeLocation {
                warehouse: "s3://bucket/lake".into(),
                namespace: "shop_1".into(),
                catalog: LakeCatalog::Glue {
                    region: Some("eu-west-1".into()),
                    catalog_id: None,
                },
            })
        );
        for (warehouse, database, key) in [
            ("file://./x", "shop", "`warehouse`"),
            ("s3://", "shop", "`warehouse`"),
            ("s3://bucket/lake", "Shop-1", "`glue_database_name`"),
            ("s3://bucket/lake", "", "`glue_database_name`"),
        ] {
            let err = lake_location(
                &athena(warehouse, database),
                Path::new("/p"),
                &StoreKind::Embedded,
            )
            .map(|_| ());
            assert!(
                matches!(err, Err(SinkError::Config { ref message, .. }) if message.contains(key)),
                "{warehouse} {database}: {err:?}"
            );
        }
        Ok(())
    }

    fn skipprlake(
        warehouse: &str,
        catalog_table: Option<&str>,
        object_store: Option<crate::config::connectors::ObjectStoreKind>,
    ) -> Named<SinkConnector> {
        Named {
            name: "lake".into(),
            connector: SinkConnector::SkipprLake(crate::config::connectors::SkipprLakeSinkConfig {
                version: None,
                warehouse: warehouse.into(),
                catalog_table: catalog_table.map(str::to_owned),
                table_namespace: None,
                region: None,
                object_store,
            }),
        }
    }

    #[test]
    fn skipprlake_on_s3_keeps_pointers_in_dynamodb_and_refuses_the_embedded_store()
    -> Result<(), SinkError> {
        use crate::config::connectors::ObjectStoreKind;
        let dynamo = StoreKind::Dynamodb {
            table: "state".into(),
        };
        let p = Path::new("/p");
        let loc = lake_location(&skipprlake("s3://bucket/lake/", None, None), p, &dynamo)?;
        assert_eq!(
            loc,
            Some(LakeLocation {
                warehouse: "s3://bucket/lake".into(),
                namespace: "default".into(),
                catalog: LakeCatalog::Dynamo {
                    table: "state".into(),
                    region: None,
                },
            })
        );
        let sink = skipprlake("s3://bucket/lake", Some("lake.pointers"), None);
        for store in [&dynamo, &StoreKind::Embedded] {
            let loc = lake_location(&sink, p, store)?.map(|l| l.catalog);
            assert_eq!(
                loc,
                Some(LakeCatalog::Dynamo {
                    table: "lake.pointers".into(),
                    region: None,
                }),
                "catalog_table wins over the state store's table"
            );
        }
        let embedded = lake_location(
            &skipprlake("s3://bucket/lake", None, None),
            p,
            &StoreKind::Embedded,
        );
        match embedded {
            Err(SinkError::Config { message, .. }) => {
                for key in ["catalog_table", "skippr.store", "skipprd store create"] {
                    assert!(message.contains(key), "{key} not in: {message}");
                }
            }
            other => panic!("an s3 warehouse with the embedded store was accepted: {other:?}"),
        }
        for (sink, key) in [
            (
                skipprlake("file://./x", None, Some(ObjectStoreKind::S3)),
                "`object_store: s3`",
            ),
            (
                skipprlake("s3://b/x", None, Some(ObjectStoreKind::File)),
                "`object_store: file`",
            ),
            (skipprlake("s3://", None, None), "`warehouse`"),
            (
                skipprlake("s3://bucket/x", Some("a/b"), None),
                "`catalog_table`",
            ),
        ] {
            let err = lake_location(&sink, p, &dynamo).map(|_| ());
            assert!(
                matches!(err, Err(SinkError::Config { ref message, .. }) if message.contains(key)),
                "{key}: {err:?}"
            );
        }
        // object_store: s3 agrees with an s3:// warehouse.
        let loc = lake_location(
            &skipprlake("s3://bucket/l", None, Some(ObjectStoreKind::S3)),
            p,
            &dynamo,
        )?;
        assert_eq!(loc.map(|l| l.warehouse), Some("s3://bucket/l".to_owned()));
        Ok(())
    }
}
