//! The overwrite-on-retry destinations (`File`, `S3`, `Athena`, `Stdout`) and the schema sinks
//! paired with a data sink (`Glue`, and `AthenaIceberg`/`Duckdb`/`SkipprLake`, which must
//! equal their data sink), resolved. Pure: nothing here opens a file or calls a service.

use std::path::{Path, PathBuf};

use super::super::connectors::{
    AthenaSinkConfig, ConnectorSet as _, OutputFormat, SchemaSinkConnector, SinkConnector,
};
use super::super::error::ConfigError;
use super::destination::{Layout, resolve_sink};
use super::{Named, StoreKind, Transform, Validator};

/// A pipeline's overwrite-on-retry destination: files in the Hive layout, named after the
/// pipeline and WAL batch id, so a retried delivery replaces and never duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDestination {
    /// The sink's logical name (`athena` for `data_sinks.athena`), for messages.
    pub name: String,
    /// Where the files go.
    pub kind: FileDestinationKind,
    /// The file format.
    pub format: OutputFormat,
    /// Partition and sort settings (from the pipeline's `transform`).
    pub layout: Layout,
}

/// Where a [`FileDestination`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileDestinationKind {
    /// `File`: a local directory (absolute).
    File {
        /// The output directory.
        dir: PathBuf,
    },
    /// `S3`: a key prefix of a bucket.
    S3 {
        /// The bucket.
        bucket: String,
        /// The key prefix (no leading or trailing `/`; may be empty).
        prefix: String,
        /// The AWS region (`None`: the environment's).
        region: Option<String>,
        /// An S3-compatible endpoint (`None`: `AWS_ENDPOINT_URL`, else AWS).
        endpoint: Option<String>,
    },
    /// `Athena`: S3 files plus one Glue table per namespace.
    Athena(AthenaTarget),
    /// `Stdout`: JSON lines on standard output (no guarantee).
    Stdout,
}

/// An `Athena` sink (or a `Glue` schema sink) resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AthenaTarget {
    /// The data bucket.
    pub bucket: String,
    /// The key prefix of the tables (no leading or trailing `/`).
    pub prefix: String,
    /// The Glue database.
    pub database: String,
    /// The AWS region (`None`: the environment's).
    pub region: Option<String>,
    /// The Glue catalog id (`None`: the caller's account).
    pub catalog_id: Option<String>,
    /// The Athena workgroup (`None`: `primary`).
    pub workgroup: Option<String>,
    /// The bucket for Athena's query results.
    pub results_bucket: Option<String>,
    /// How long a table's Glue definition, once read or written, is trusted before it is read
    /// again (`discovery_cache_ttl_secs`); `None`: read at every delivery.
    pub glue_cache_ttl: Option<std::time::Duration>,
    /// The most file uploads in flight at once (`max_concurrency`, default 4).
    pub upload_concurrency: usize,
}

/// Default of `max_concurrency`: uploads in flight at once.
pub const DEFAULT_UPLOAD_CONCURRENCY: usize = 4;

/// A key prefix without leading or trailing `/`.
fn trim_prefix(prefix: &str) -> String {
    prefix.trim_matches('/').to_owned()
}

impl Validator<'_> {
    /// The Glue database name, checked: Athena's rule (lowercase letters, digits, `_`).
    pub(super) fn check_glue_database(&self, key: &str, database: &str) -> Result<(), ConfigError> {
        self.check_database(key, database)
    }

    /// The Glue database name, checked: Athena's rule (lowercase letters, digits, `_`).
    fn check_database(&self, key: &str, database: &str) -> Result<(), ConfigError> {
        if database.is_empty()
            || database.len() > 255
            || !database
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
        {
            return Err(self.bad_value(
                key,
                &format!(
                    "`{database}` must be lowercase letters, digits or `_` (Athena's rule for database names)"
                ),
            ));
        }
        Ok(())
    }

    /// The overwrite-on-retry destination of a pipeline delivering to `sink`, with its schema
    /// sink, or `None` for a lake sink. Checks the pairing of the schema sink with the data
    /// sink (a paired lake schema sink equal to it; a `Glue` database agreeing with the
    /// `Athena` sink's).
    pub(super) fn file_destination(
        &self,
        sink: &Named<SinkConnector>,
        schema_sink: Option<&Named<SchemaSinkConnector>>,
        transform: &Transform,
        store: &StoreKind,
    ) -> Result<Option<FileDestination>, ConfigError> {
        let at = |key: &str| {
            format!(
                "data_sinks.{}.{}.{key}",
                sink.name,
                sink.connector.type_name()
            )
        };
        self.check_paired(sink, schema_sink, store)?;
        let layout = Layout::from_transform(transform);
        let (kind, format) = match &sink.connector {
            SinkConnector::File(c) => {
                if c.output_dir.trim().is_empty() {
                    return Err(self.bad_value(&at("output_dir"), "must not be empty"));
                }
                let path = Path::new(&c.output_dir);
                let dir = if path.is_absolute() {
                    path.to_path_buf()
                } else {
                    self.base_dir.join(path)
                };
                let dir = std::path::absolute(&dir).unwrap_or(dir);
                (FileDestinationKind::File { dir }, c.format)
            }
            SinkConnector::S3(c) => (
                FileDestinationKind::S3 {
                    bucket: c.s3_bucket.clone(),
                    prefix: trim_prefix(c.s3_prefix.as_deref().unwrap_or("")),
                    region: c.region.clone(),
                    endpoint: c.endpoint.clone(),
                },
                c.format,
            ),
            SinkConnector::Athena(c) => {
                let target = self.athena_target(&sink.name, c, schema_sink)?;
                if c.format.is_some_and(|f| f != OutputFormat::Parquet) {
                    return Err(self.bad_value(
                        &at("format"),
                        "must be `parquet`: the Glue tables declare Parquet",
                    ));
                }
                (FileDestinationKind::Athena(target), c.format)
            }
            SinkConnector::Stdout(c) => {
                if c.format.is_some_and(|f| f != OutputFormat::Jsonl) {
                    return Err(self.bad_value(
                        &at("format"),
                        "must be `jsonl` (the default): `Stdout` prints JSON lines only; for CSV or Parquet files use the `File` sink (`File: {output_dir: ..., format: csv}`)",
                    ));
                }
                (FileDestinationKind::Stdout, Some(OutputFormat::Jsonl))
            }
            _ => {
                if let Some(glue) =
                    schema_sink.filter(|s| matches!(s.connector, SchemaSinkConnector::Glue(_)))
                {
                    return Err(self.bad_value(
                        &format!("schema_sinks.{}", glue.name),
                        &format!(
                            "a `Glue` schema sink describes the Hive tables of an `Athena` data sink, but `data_sinks.{}` is `{}`",
                            sink.name,
                            sink.connector.type_name()
                        ),
                    ));
                }
                return Ok(None);
            }
        };
        if matches!(
            kind,
            FileDestinationKind::File { .. } | FileDestinationKind::S3 { .. }
        ) && let Some(s) =
            schema_sink.filter(|s| matches!(s.connector, SchemaSinkConnector::Glue(_)))
        {
            return Err(self.bad_value(
                &format!("schema_sinks.{}", s.name),
                &format!(
                    "a `Glue` schema sink describes the Hive tables of an `Athena` data sink, but `data_sinks.{}` is `{}`",
                    sink.name,
                    sink.connector.type_name()
                ),
            ));
        }
        Ok(Some(FileDestination {
            name: sink.name.clone(),
            kind,
            format: format.unwrap_or(OutputFormat::Parquet),
            layout,
        }))
    }

    /// The Athena sink resolved: its database from its own key or the `Glue` schema sink's
    /// (both set: equal), the other optional keys from the sink, else the schema sink.
    fn athena_target(
        &self,
        name: &str,
        c: &AthenaSinkConfig,
        schema_sink: Option<&Named<SchemaSinkConnector>>,
    ) -> Result<AthenaTarget, ConfigError> {
        let at = |key: &str| format!("data_sinks.{name}.Athena.{key}");
        self.check_bucket(&at("s3_bucket"), &c.s3_bucket)?;
        if c.s3_bucket.trim().is_empty() {
            return Err(self.bad_value(&at("s3_bucket"), "must not be empty"));
        }
        let glue = schema_sink.and_then(|s| match &s.connector {
            SchemaSinkConnector::Glue(g) => Some((s.name.as_str(), g)),
            _ => None,
        });
        let database = match (&c.glue_database_name, glue) {
            (Some(own), Some((glue_name, g))) if *own != g.glue_database_name => {
                return Err(self.bad_value(
                    &at("glue_database_name"),
                    &format!(
                        "`{own}` does not match `schema_sinks.{glue_name}.Glue.glue_database_name` `{}`: the Glue schema sink describes this sink's tables, so both must name one database",
                        g.glue_database_name
                    ),
                ));
            }
            (Some(own), _) => own.clone(),
            (None, Some((_, g))) => g.glue_database_name.clone(),
            (None, None) => {
                return Err(self.bad_value(
                    &at("glue_database_name"),
                    "is required (or a `Glue` schema sink naming the database, as `schema_sink` of the sink or the pipeline)",
                ));
            }
        };
        self.check_database(&at("glue_database_name"), &database)?;
        if let Some((glue_name, g)) = glue {
            let gat = |key: &str| format!("schema_sinks.{glue_name}.Glue.{key}");
            let agree = |key: &str, theirs: &Option<String>, ours: &str| match theirs {
                Some(v) if trim_prefix(v) != trim_prefix(ours) => Err(self.bad_value(
                    &gat(key),
                    &format!("`{v}` does not match `data_sinks.{name}.Athena.{key}` `{ours}`"),
                )),
                _ => Ok(()),
            };
            agree("s3_bucket", &g.s3_bucket, &c.s3_bucket)?;
            agree("s3_prefix", &g.s3_prefix, &c.s3_prefix)?;
        }
        let from_glue =
            |f: fn(&super::super::connectors::GlueSchemaSinkConfig) -> &Option<String>| {
                glue.and_then(|(_, g)| f(g).clone())
            };
        let results_bucket = c
            .athena_results_s3_bucket
            .clone()
            .or_else(|| from_glue(|g| &g.athena_results_s3_bucket));
        if let Some(b) = &results_bucket {
            self.check_bucket(&at("athena_results_s3_bucket"), b)?;
        }
        if c.max_concurrency.is_some_and(|n| !(1..=64).contains(&n)) {
            return Err(self.bad_value(&at("max_concurrency"), "must be 1 to 64"));
        }
        Ok(AthenaTarget {
            bucket: c.s3_bucket.clone(),
            prefix: trim_prefix(&c.s3_prefix),
            database,
            region: c.region.clone().or_else(|| from_glue(|g| &g.region)),
            catalog_id: c.catalog.clone().or_else(|| from_glue(|g| &g.catalog)),
            workgroup: c
                .athena_workgroup_name
                .clone()
                .or_else(|| from_glue(|g| &g.athena_workgroup_name)),
            results_bucket,
            upload_concurrency: c
                .max_concurrency
                .map_or(DEFAULT_UPLOAD_CONCURRENCY, |n| n as usize),
            glue_cache_ttl: c
                .discovery_cache_ttl_secs
                .filter(|s| *s > 0)
                .map(std::time::Duration::from_secs),
        })
    }

    /// A paired lake schema sink (`AthenaIceberg`, `Duckdb`, `SkipprLake`) must be the data
    /// sink's own type with the same tables (warehouse and namespace).
    fn check_paired(
        &self,
        sink: &Named<SinkConnector>,
        schema_sink: Option<&Named<SchemaSinkConnector>>,
        store: &StoreKind,
    ) -> Result<(), ConfigError> {
        let Some(schema) = schema_sink else {
            return Ok(());
        };
        let paired = match &schema.connector {
            SchemaSinkConnector::AthenaIceberg(c) => SinkConnector::AthenaIceberg(c.clone()),
            SchemaSinkConnector::Duckdb(c) => SinkConnector::Duckdb(c.clone()),
            SchemaSinkConnector::SkipprLake(c) => SinkConnector::SkipprLake(c.clone()),
            _ => return Ok(()),
        };
        let key = format!(
            "schema_sinks.{}.{}",
            schema.name,
            schema.connector.type_name()
        );
        let mismatch = |why: String| {
            self.bad_value(
                &key,
                &format!(
                    "a `{}` schema sink must equal its data sink, but `data_sinks.{}` {why}",
                    schema.connector.type_name(),
                    sink.name
                ),
            )
        };
        if paired.type_name() != sink.connector.type_name() {
            return Err(mismatch(format!("is `{}`", sink.connector.type_name())));
        }
        let ours = resolve_sink(&paired, self.base_dir, store).ok().flatten();
        let theirs = resolve_sink(&sink.connector, self.base_dir, store)
            .ok()
            .flatten();
        match (ours, theirs) {
            (Some((_, a)), Some((_, b))) if a == b => Ok(()),
            (Some((_, a)), Some((_, b))) => Err(mismatch(format!(
                "has warehouse `{}` namespace `{}` and this one warehouse `{}` namespace `{}`",
                b.warehouse, b.namespace, a.warehouse, a.namespace
            ))),
            _ => Err(mismatch("cannot be compared with it".to_owned())),
        }
    }
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
