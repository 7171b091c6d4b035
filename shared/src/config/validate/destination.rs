//! A pipeline's destination, resolved: where its lake lives (warehouse, namespace, catalog),
//! its maintenance settings and its layout. Pure: nothing here opens a file or calls a service
//! (the sink builds its catalog from a [`LakeLocation`] with I/O of its own).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::super::TimeUnit;
use super::super::connectors::{
    AthenaIcebergSinkConfig, ConnectorSet as _, DuckdbSinkConfig, Entry, ObjectStoreKind,
    ObjectStoreMap, ObjectStoreSetting, ObjectStoreType, SinkConnector, SkipprLakeSinkConfig,
};
use super::super::error::ConfigError;
use super::{StoreKind, Transform, Validator};

/// The default `table_namespace`.
pub const DEFAULT_TABLE_NAMESPACE: &str = "default";

/// A pipeline's destination: a lake sink with everything the config says about it resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The sink's logical name (`lake` for `data_sinks.lake`), for messages.
    pub name: String,
    /// The connector type, with what only that type has.
    pub kind: DestinationKind,
    /// Where the tables live and how their current metadata is recorded.
    pub location: LakeLocation,
    /// The maintenance settings (unset ones take the sink's defaults).
    pub maintenance: Maintenance,
    /// How rows are laid out in the tables (from the pipeline's `transform`).
    pub layout: Layout,
}

/// The connector type of a [`Destination`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestinationKind {
    /// `Duckdb`: a `file://` warehouse in the Hadoop layout.
    Duckdb,
    /// `SkipprLake`: pointers in a catalog store (embedded, or DynamoDB on S3).
    SkipprLake,
    /// `AthenaIceberg`: tables on S3 registered in Glue.
    AthenaIceberg {
        /// The Athena workgroup (`athena_workgroup_name`; `None`: the default one).
        workgroup: Option<String>,
        /// The bucket for Athena's query results (`athena_results_s3_bucket`).
        results_bucket: Option<String>,
    },
}

impl DestinationKind {
    /// The connector's type name, as written in the config (`Duckdb`).
    pub fn type_name(&self) -> &'static str {
        match self {
            DestinationKind::Duckdb => "Duckdb",
            DestinationKind::SkipprLake => "SkipprLake",
            DestinationKind::AthenaIceberg { .. } => "AthenaIceberg",
        }
    }
}

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
    /// table: keys `pk`, `sk`), partition `catalog#{warehouse}`.
    Dynamo {
        /// The table (`catalog_table`, default the state store's table).
        table: String,
        /// The AWS region (`None`: the environment's).
        region: Option<String>,
        /// The files' S3-compatible store, when `object_store` names one of its own (an
        /// endpoint, keys); `None`: the AWS configuration chain, as the pointers.
        files: Option<ObjectStoreAccess>,
    },
    /// `AthenaIceberg`: the Glue table of each Iceberg table (database = the namespace).
    Glue {
        /// The AWS region (`None`: the environment's).
        region: Option<String>,
        /// The Glue catalog id (`None`: the caller's account).
        catalog_id: Option<String>,
    },
}

/// How to reach an S3-compatible store of a `SkipprLake` warehouse (its `object_store` map).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStoreAccess {
    /// The S3 API endpoint (`None`: the environment's).
    pub endpoint: Option<String>,
    /// `(access_key_id, secret_access_key)` (`None`: the AWS configuration chain).
    pub keys: Option<(crate::config::Secret, crate::config::Secret)>,
    /// Path-style requests (`None`: path-style with an endpoint).
    pub path_style: Option<bool>,
}

/// The maintenance settings of a lake sink (the `Duckdb` sink's keys), checked and in their
/// units; `None` where the config says nothing, so the sink's default applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Maintenance {
    /// `auto_maintenance`: run after delivery commits when something is due.
    pub auto: Option<bool>,
    /// `snapshot_retain_last` (at least 1): the newest snapshots always kept.
    pub retain_last: Option<usize>,
    /// `snapshot_max_age_minutes`: keep every snapshot that was current within this long.
    pub max_snapshot_age: Option<Duration>,
    /// `compact_target_file_mb` (at least 1), in bytes.
    pub target_file_size: Option<u64>,
    /// `compact_min_files`: compact when more than this many data files are small.
    pub compact_min_files: Option<usize>,
    /// `orphan_min_age_minutes`: unreferenced files are deleted once this old.
    pub orphan_min_age: Option<Duration>,
    /// `metadata_retain_versions`: old metadata files kept besides the current one.
    pub retain_metadata_versions: Option<u64>,
}

/// The layout settings of a pipeline's tables (from its `transform`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// Identity partition fields (dot paths).
    pub partition_fields: Vec<String>,
    /// Candidate time partition fields (dot paths); the first present is used.
    pub time_fields: Vec<String>,
    /// The time partition granularity (default day).
    pub time_unit: Option<TimeUnit>,
    /// Sort fields (dot paths).
    pub order_fields: Vec<String>,
    /// The values an identity partition may take (`partition_allowed_values`); others land in
    /// [`Layout::OTHER_PARTITION`]. Empty: any value.
    pub allowed_values: Vec<String>,
    /// The time partition key's name (`time_partition_prefix`); `None`: `{path}_{unit}`.
    pub time_key: Option<String>,
}

impl Layout {
    /// The layout a pipeline's `transform` section asks for.
    pub fn from_transform(t: &Transform) -> Self {
        Layout {
            partition_fields: t.batch_partition_fields.clone(),
            time_fields: t.batch_time_fields.clone(),
            time_unit: t.batch_time_unit,
            order_fields: t.batch_order_fields.clone(),
            allowed_values: t.partition_allowed_values.clone(),
            time_key: t.time_partition_prefix.clone(),
        }
    }

    /// The partition a value outside `partition_allowed_values` lands in.
    pub const OTHER_PARTITION: &'static str = "_other";

    /// The time partition key's name for the first time field `path` at `unit`:
    /// `time_partition_prefix`, else `{path}_{unit}` (dots as `_`).
    pub fn time_key_name(&self, path: &str, unit_name: &str) -> String {
        self.time_key
            .clone()
            .unwrap_or_else(|| format!("{}_{unit_name}", path.replace('.', "_")))
    }
}

/// What is wrong with a sink setting: the key under the connector (`warehouse`), and why.
#[derive(Debug)]
pub(super) struct Bad {
    key: &'static str,
    message: String,
}

fn bad(key: &'static str, message: impl Into<String>) -> Bad {
    Bad {
        key,
        message: message.into(),
    }
}

/// A lake sink resolved, before a pipeline adds its layout.
#[derive(Debug, Clone)]
pub(super) struct ResolvedSink {
    kind: DestinationKind,
    location: LakeLocation,
    maintenance: Maintenance,
}

impl ResolvedSink {
    /// The destination of a pipeline delivering to this sink (named `name`).
    pub(super) fn destination(&self, name: &str, transform: &Transform) -> Destination {
        Destination {
            name: name.to_owned(),
            kind: self.kind.clone(),
            location: self.location.clone(),
            maintenance: self.maintenance.clone(),
            layout: Layout::from_transform(transform),
        }
    }
}

impl Validator<'_> {
    /// The error about sink `name`, at the key the problem is in.
    pub(super) fn sink_error(&self, name: &str, connector: &SinkConnector, e: Bad) -> ConfigError {
        self.bad_value(
            &format!("data_sinks.{name}.{}.{}", connector.type_name(), e.key),
            &e.message,
        )
    }

    /// Check every sink of `data_sinks` (warehouse schemes, bucket names, maintenance
    /// settings, one sink per warehouse + namespace) and resolve the lake sinks, by name.
    pub(super) fn destinations(
        &self,
        sinks: &BTreeMap<String, Entry<SinkConnector>>,
        store: &StoreKind,
    ) -> Result<BTreeMap<String, ResolvedSink>, ConfigError> {
        let mut owners: BTreeSet<(String, String)> = BTreeSet::new();
        let mut resolved = BTreeMap::new();
        for (name, entry) in sinks {
            let at = |key: &str| format!("data_sinks.{name}.{}.{key}", entry.connector.type_name());
            let to_config = |e: Bad| self.sink_error(name, &entry.connector, e);
            match &entry.connector {
                SinkConnector::Duckdb(_) | SinkConnector::SkipprLake(_) => {
                    if let SinkConnector::Duckdb(c) = &entry.connector
                        && !c.warehouse.starts_with("file://")
                    {
                        return Err(self.bad_value(&at("warehouse"), "must be a file:// URI"));
                    }
                    if let SinkConnector::SkipprLake(c) = &entry.connector
                        && !(c.warehouse.starts_with("file://") || c.warehouse.starts_with("s3://"))
                    {
                        return Err(
                            self.bad_value(&at("warehouse"), "must be an s3:// or file:// URI")
                        );
                    }
                }
                SinkConnector::AthenaIceberg(c) => {
                    if !c.warehouse.starts_with("s3://") {
                        return Err(self.bad_value(&at("warehouse"), "must be an s3:// URI"));
                    }
                    if let Some(b) = &c.athena_results_s3_bucket {
                        self.check_bucket(&at("athena_results_s3_bucket"), b)?;
                    }
                }
                SinkConnector::Athena(c) => {
                    self.check_bucket(&at("s3_bucket"), &c.s3_bucket)?;
                    if let Some(b) = &c.athena_results_s3_bucket {
                        self.check_bucket(&at("athena_results_s3_bucket"), b)?;
                    }
                }
                SinkConnector::S3(c) => {
                    self.check_bucket(&at("s3_bucket"), &c.s3_bucket)?;
                }
                SinkConnector::Postgres(c) => self.check_postgres_sink(name, c)?,
                _ => {}
            }
            let maintenance = match &entry.connector {
                SinkConnector::Duckdb(c) => maintenance(c).map_err(to_config)?,
                _ => Maintenance::default(),
            };
            let Some(sink) = resolve_sink(&entry.connector, self.base_dir, store)
                .map_err(to_config)?
                .map(|(kind, location)| ResolvedSink {
                    kind,
                    location,
                    maintenance,
                })
            else {
                continue;
            };
            let key = (
                sink.location.warehouse.trim_end_matches('/').to_owned(),
                sink.location.namespace.clone(),
            );
            if !owners.insert(key.clone()) {
                return Err(self.bad_value(
                    &format!("data_sinks.{name}"),
                    &format!("warehouse '{}' namespace '{}' is already used by another sink; each lake sink owns its warehouse + namespace", key.0, key.1),
                ));
            }
            resolved.insert(name.clone(), sink);
        }
        Ok(resolved)
    }
}

/// The kind and location of a lake sink, or `None` for a connector that is not one.
pub(super) fn resolve_sink(
    connector: &SinkConnector,
    base_dir: &Path,
    store: &StoreKind,
) -> Result<Option<(DestinationKind, LakeLocation)>, Bad> {
    Ok(match connector {
        SinkConnector::Duckdb(c) => Some((
            DestinationKind::Duckdb,
            file_location(
                &c.warehouse,
                c.table_namespace.as_deref(),
                LakeCatalog::Hadoop,
                base_dir,
            )?,
        )),
        SinkConnector::SkipprLake(c) => Some((
            DestinationKind::SkipprLake,
            skipprlake_location(c, base_dir, store)?,
        )),
        SinkConnector::AthenaIceberg(c) => Some((
            DestinationKind::AthenaIceberg {
                workgroup: c.athena_workgroup_name.clone(),
                results_bucket: c.athena_results_s3_bucket.clone(),
            },
            glue_location(c)?,
        )),
        _ => None,
    })
}

/// The maintenance settings of a `Duckdb` sink; the error names the key at fault.
fn maintenance(c: &DuckdbSinkConfig) -> Result<Maintenance, Bad> {
    let minutes = |m: u64| Duration::from_secs(m.saturating_mul(60));
    if c.snapshot_retain_last == Some(0) {
        return Err(bad(
            "snapshot_retain_last",
            "`snapshot_retain_last` must be at least 1 (the current snapshot is always kept)",
        ));
    }
    if c.compact_target_file_mb == Some(0) {
        return Err(bad(
            "compact_target_file_mb",
            "`compact_target_file_mb` must be at least 1",
        ));
    }
    Ok(Maintenance {
        auto: c.auto_maintenance,
        retain_last: c.snapshot_retain_last.map(|n| n as usize),
        max_snapshot_age: c.snapshot_max_age_minutes.map(minutes),
        target_file_size: c
            .compact_target_file_mb
            .map(|mb| mb.saturating_mul(1 << 20)),
        compact_min_files: c.compact_min_files.map(|n| n as usize),
        orphan_min_age: c.orphan_min_age_minutes.map(minutes),
        retain_metadata_versions: c.metadata_retain_versions,
    })
}

/// The location of a `SkipprLake` sink: on S3, its pointers in DynamoDB; on a `file://`
/// warehouse, in the embedded catalog store `catalog_table` (default `catalog`).
fn skipprlake_location(
    c: &SkipprLakeSinkConfig,
    base_dir: &Path,
    store: &StoreKind,
) -> Result<LakeLocation, Bad> {
    let on_s3 = c.warehouse.starts_with("s3://");
    let store_on_s3 = c.object_store.as_ref().map(|o| o.is_s3());
    match (store_on_s3, on_s3) {
        (Some(true), false) => {
            return Err(bad(
                "object_store",
                format!(
                    "an S3 or R2 `object_store` needs an `s3://bucket/prefix` `warehouse`, got `{}`",
                    c.warehouse
                ),
            ));
        }
        (Some(false), true) => {
            return Err(bad(
                "object_store",
                format!(
                    "a `file` `object_store` needs a `file://` `warehouse`, got `{}`",
                    c.warehouse
                ),
            ));
        }
        _ => {}
    }
    if on_s3 {
        return skipprlake_s3_location(c, store);
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
        return Err(bad(
            "catalog_table",
            format!(
                "`catalog_table` `{name}` must be letters, digits, `_` or `-` (it names a file)"
            ),
        ));
    }
    file_location(
        &c.warehouse,
        c.table_namespace.as_deref(),
        LakeCatalog::Store { name },
        base_dir,
    )
}

/// A `file://` warehouse resolved against `base_dir` (the config file's directory) and then
/// the working directory, and its namespace.
fn file_location(
    warehouse: &str,
    namespace: Option<&str>,
    catalog: LakeCatalog,
    base_dir: &Path,
) -> Result<LakeLocation, Bad> {
    let Some(rest) = warehouse.strip_prefix("file://") else {
        return Err(bad(
            "warehouse",
            format!(
                "`warehouse` must be a `file://` URI (e.g. `file://./lake`), got `{warehouse}`"
            ),
        ));
    };
    if rest.is_empty() {
        return Err(bad("warehouse", "`warehouse` names no directory"));
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
    Ok(LakeLocation {
        warehouse: format!("file://{}", warehouse.display()),
        namespace: table_namespace(namespace)?,
        catalog,
    })
}

/// The `table_namespace` (default [`DEFAULT_TABLE_NAMESPACE`]), checked: it names a
/// directory or key prefix.
fn table_namespace(namespace: Option<&str>) -> Result<String, Bad> {
    let namespace = namespace.unwrap_or(DEFAULT_TABLE_NAMESPACE).to_owned();
    if namespace.is_empty()
        || namespace.starts_with('.')
        || !namespace
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(bad(
            "table_namespace",
            format!(
                "`table_namespace` `{namespace}` must be letters, digits, `_` or `-` (it names a directory)"
            ),
        ));
    }
    Ok(namespace)
}

/// An `s3://bucket/prefix` warehouse without its trailing `/`.
fn s3_warehouse(warehouse: &str) -> Result<&str, Bad> {
    let trimmed = warehouse.trim_end_matches('/');
    match trimmed
        .strip_prefix("s3://")
        .map(|rest| rest.split('/').next().unwrap_or(""))
    {
        None => Err(bad(
            "warehouse",
            format!("`warehouse` must be an `s3://bucket/prefix` URI, got `{warehouse}`"),
        )),
        Some(bucket) if bucket.len() < 3 => Err(bad(
            "warehouse",
            format!("`warehouse` `{warehouse}` names no S3 bucket (`s3://bucket/prefix`)"),
        )),
        Some(_) => Ok(trimmed),
    }
}

/// The location of a `SkipprLake` sink on S3: its pointers in the DynamoDB table
/// `catalog_table`, else the state store's table.
fn skipprlake_s3_location(
    c: &SkipprLakeSinkConfig,
    store: &StoreKind,
) -> Result<LakeLocation, Bad> {
    let warehouse = s3_warehouse(&c.warehouse)?;
    let files = match &c.object_store {
        Some(ObjectStoreSetting::Map(m)) => Some(object_store_access(m)?),
        _ => None,
    };
    let table = match (&c.catalog_table, store) {
        (Some(table), _) => table.clone(),
        (None, StoreKind::Dynamodb { table }) => table.clone(),
        (None, StoreKind::Embedded) => {
            return Err(bad(
                "catalog_table",
                format!(
                    "an `s3://` warehouse keeps its catalog pointers in DynamoDB, and the state store is the embedded one: set `catalog_table` to a DynamoDB table (create it with `skipprd store create`), or set `skippr.store` to `{{type: dynamodb, name: <table>}}` (`warehouse` `{}`)",
                    c.warehouse
                ),
            ));
        }
    };
    if !(3..=255).contains(&table.len())
        || !table
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.'))
    {
        return Err(bad(
            "catalog_table",
            format!(
                "`catalog_table` `{table}` is not a DynamoDB table name (3 to 255 letters, digits, `_`, `-` or `.`)"
            ),
        ));
    }
    Ok(LakeLocation {
        warehouse: warehouse.to_owned(),
        namespace: table_namespace(c.table_namespace.as_deref())?,
        catalog: LakeCatalog::Dynamo {
            table,
            region: c.region.clone(),
            files,
        },
    })
}

/// The access an `object_store` map of an S3-compatible store gives.
fn object_store_access(m: &ObjectStoreMap) -> Result<ObjectStoreAccess, Bad> {
    if let Some(endpoint) = &m.endpoint
        && !(endpoint.starts_with("https://") || endpoint.starts_with("http://"))
    {
        return Err(bad(
            "object_store.endpoint",
            format!("`{endpoint}` is not an http:// or https:// URL"),
        ));
    }
    if m.store_type == ObjectStoreType::R2 && m.endpoint.is_none() {
        return Err(bad(
            "object_store.endpoint",
            "an `r2` store needs its `endpoint` (`https://<account id>.r2.cloudflarestorage.com`)"
                .to_owned(),
        ));
    }
    let keys = match (&m.access_key_id, &m.secret_access_key) {
        (Some(id), Some(secret)) => Some((id.clone(), secret.clone())),
        (None, None) => None,
        (Some(_), None) => {
            return Err(bad(
                "object_store.secret_access_key",
                "`access_key_id` is set without `secret_access_key`".to_owned(),
            ));
        }
        (None, Some(_)) => {
            return Err(bad(
                "object_store.access_key_id",
                "`secret_access_key` is set without `access_key_id`".to_owned(),
            ));
        }
    };
    Ok(ObjectStoreAccess {
        endpoint: m.endpoint.clone(),
        keys,
        path_style: m.path_style,
    })
}

/// The location of an `AthenaIceberg` sink: an S3 warehouse, the Glue database as namespace.
fn glue_location(c: &AthenaIcebergSinkConfig) -> Result<LakeLocation, Bad> {
    let warehouse = s3_warehouse(&c.warehouse)?;
    if matches!(c.object_store, Some(ObjectStoreKind::File)) {
        return Err(bad(
            "object_store",
            "`object_store` must be `s3` for AthenaIceberg (its warehouse is in S3)",
        ));
    }
    let database = &c.glue_database_name;
    if database.is_empty()
        || database.len() > 255
        || !database
            .chars()
            .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
    {
        return Err(bad(
            "glue_database_name",
            format!(
                "`glue_database_name` `{database}` must be lowercase letters, digits or `_` (Athena's rule for database names)"
            ),
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
