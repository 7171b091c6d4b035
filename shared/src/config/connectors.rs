//! Connector entries: `data_sources`, `data_sinks`, `deadletter_sinks` and `schema_sinks`.
//!
//! Each entry is a logical name mapped to exactly one PascalCase connector type, whose value
//! holds that connector's fields (every connector also accepts an optional `version` pin):
//!
//! ```yaml
//! data_sinks:
//!   lake:                          # logical name (no dots)
//!     Duckdb:                      # exactly one connector type
//!       warehouse: file://./lake
//!     schema_sink: schema_sinks.files   # optional, sinks only
//! ```
//!
//! Every connector of the product is modelled here, so a config written for a later version
//! parses and validates its keys today; one that this build cannot run yet fails validation
//! with "connector `X` (section.name) is not supported yet", never a silent no-op.

use std::fmt;
use std::marker::PhantomData;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

pub use super::http::{
    AuthStrategy, HttpAuth, HttpClientSourceConfig, HttpFormat, HttpIncremental, HttpMethod,
    HttpPaginator, HttpPaginatorConfig, ResolvedAuth,
};
pub use super::postgres::{
    CdcMode, PgSslMode, PostgresSourceConfig, PostgresTable, PostgresTableConfig,
};
use super::secret::Secret;

/// A family of connector types that can appear under one section.
pub trait ConnectorSet: Sized {
    /// The section the entries live in (`data_sources`, ...).
    const SECTION: &'static str;
    /// The connector type names, PascalCase, as written in the file.
    const TYPES: &'static [&'static str];
    /// The keys an entry accepts: the types, plus `schema_sink` where allowed.
    const ENTRY_KEYS: &'static [&'static str];
    /// Deserialize the fields of connector `type_name`.
    fn deserialize_type<'de, D: Deserializer<'de>>(type_name: &str, d: D)
    -> Result<Self, D::Error>;
    /// This connector's type name.
    fn type_name(&self) -> &'static str;
    /// Whether this build can run the connector.
    fn is_supported(&self) -> bool;
    /// The `version` pin, if any.
    fn version(&self) -> Option<&str>;
}

macro_rules! connector_set {
    (
        $(#[$meta:meta])*
        $name:ident, section = $section:literal, schema_sink = $allow:tt,
        { $( $(#[$vmeta:meta])* $variant:ident($ty:ty) = $supported:expr ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        #[non_exhaustive]
        pub enum $name {
            $( $(#[$vmeta])* $variant($ty), )+
        }

        impl ConnectorSet for $name {
            const SECTION: &'static str = $section;
            const TYPES: &'static [&'static str] = &[$(stringify!($variant)),+];
            const ENTRY_KEYS: &'static [&'static str] =
                connector_set!(@keys $allow, $(stringify!($variant)),+);

            fn deserialize_type<'de, D: Deserializer<'de>>(type_name: &str, d: D) -> Result<Self, D::Error> {
                match type_name {
                    $( stringify!($variant) => <$ty>::deserialize(d).map($name::$variant), )+
                    other => Err(de::Error::unknown_variant(other, Self::TYPES)),
                }
            }

            fn type_name(&self) -> &'static str {
                match self { $( $name::$variant(_) => stringify!($variant), )+ }
            }

            fn is_supported(&self) -> bool {
                match self { $( $name::$variant(_) => $supported, )+ }
            }

            fn version(&self) -> Option<&str> {
                match self { $( $name::$variant(c) => c.version.as_deref(), )+ }
            }
        }

        impl $name {
            /// The JSON schema of each connector type, for the reference docs.
            pub fn type_schemas() -> Vec<(&'static str, schemars::Schema)> {
                vec![ $( (stringify!($variant), schemars::schema_for!($ty)), )+ ]
            }
        }
    };
    (@keys true, $($t:expr),+) => { &[$($t),+, "schema_sink"] };
    (@keys false, $($t:expr),+) => { &[$($t),+] };
}

/// One entry of a connector section: exactly one connector, plus (for sinks) an optional
/// `schema_sink` reference.
#[derive(Debug, Clone)]
pub struct Entry<C> {
    /// The connector and its fields.
    pub connector: C,
    /// `schema_sinks.<name>`: where this sink's schema is written (sinks only).
    pub schema_sink: Option<String>,
}

/// The message of the error raised when an entry names no connector type.
pub(crate) const NO_CONNECTOR: &str = "no connector type";

impl<'de, C: ConnectorSet> Deserialize<'de> for Entry<C> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor<C>(PhantomData<C>);
        struct TypeSeed<'a, C>(&'a str, PhantomData<C>);

        impl<'de, C: ConnectorSet> DeserializeSeed<'de> for TypeSeed<'_, C> {
            type Value = C;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<C, D::Error> {
                C::deserialize_type(self.0, d)
            }
        }

        impl<'de, C: ConnectorSet> Visitor<'de> for EntryVisitor<C> {
            type Value = Entry<C>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "a map with exactly one connector type ({})",
                    C::TYPES.join(", ")
                )
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry<C>, A::Error> {
                let mut connector: Option<C> = None;
                let mut schema_sink = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "schema_sink" && C::ENTRY_KEYS.contains(&"schema_sink") {
                        schema_sink = Some(map.next_value::<String>()?);
                    } else if C::TYPES.contains(&key.as_str()) {
                        if let Some(first) = &connector {
                            return Err(de::Error::custom(format!(
                                "an entry has exactly one connector type, but this one has both `{}` and `{key}`",
                                first.type_name()
                            )));
                        }
                        connector = Some(map.next_value_seed(TypeSeed::<C>(&key, PhantomData))?);
                    } else {
                        return Err(de::Error::unknown_variant(&key, C::ENTRY_KEYS));
                    }
                }
                let connector = connector.ok_or_else(|| {
                    de::Error::custom(format!(
                        "{NO_CONNECTOR}: expected exactly one of {}",
                        C::TYPES.join(", ")
                    ))
                })?;
                Ok(Entry {
                    connector,
                    schema_sink,
                })
            }
        }

        deserializer.deserialize_map(EntryVisitor(PhantomData))
    }
}

impl<C: ConnectorSet> JsonSchema for Entry<C> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        format!("{}Entry", C::SECTION).into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": format!("Exactly one connector type ({}) mapped to its fields.", C::TYPES.join(", ")),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Shared field types
// ---------------------------------------------------------------------------------------------

/// The record format of a file-like source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputFormat {
    /// One JSON object per line (`.jsonl`, `.ndjson`).
    Jsonl,
    /// JSON: a top-level array of objects, JSON lines, or concatenated (pretty-printed)
    /// documents; the shape is detected from the content.
    Json,
    /// A top-level JSON array of objects.
    JsonArray,
    /// Comma-separated values with a header row.
    Csv,
    /// Apache Parquet.
    Parquet,
}

/// The record format a file-like sink writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputFormat {
    /// Apache Parquet (default).
    Parquet,
    /// One JSON object per line.
    Jsonl,
    /// Comma-separated values with a header row (RFC 4180 quoting; nested values as JSON).
    Csv,
}

/// Where an Iceberg warehouse's files live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ObjectStoreKind {
    /// Amazon S3 (or an S3-compatible endpoint).
    S3,
    /// The local file system.
    File,
}

// ---------------------------------------------------------------------------------------------
// Sources
// ---------------------------------------------------------------------------------------------

connector_set! {
    /// A `data_sources` connector.
    SourceConnector, section = "data_sources", schema_sink = false, {
        /// Local files: a file, a directory or a glob.
        File(FileSourceConfig) = true,
        /// Objects under an S3 prefix.
        S3(S3SourceConfig) = true,
        /// PostgreSQL tables, incremental by cursor column and primary key.
        Postgres(Box<PostgresSourceConfig>) = true,
        /// A paginated JSON REST API.
        HttpClient(Box<HttpClientSourceConfig>) = true,
        /// JSON lines or CSV on standard input (a push source: what was read and not yet
        /// committed is lost on a crash).
        Stdin(StdinSourceConfig) = true,
    }
}

/// `File` source: reads local files.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSourceConfig {
    /// Connector version pin. Accepted for compatibility; this build has its connectors built in.
    #[serde(default)]
    pub version: Option<String>,
    /// A file, a directory (every non-hidden file below it) or a glob such as `data/*.jsonl`.
    /// Relative paths are resolved against the directory of the config file.
    pub path: String,
    /// Record format. Default: detected per file from its extension (`.jsonl`, `.ndjson`,
    /// `.json`, `.csv`, `.parquet`, each optionally `.gz`) and its first bytes.
    #[serde(default)]
    pub format: Option<InputFormat>,
    /// Records per batch (one Arrow record batch). Default 10000. A batch also closes once
    /// `BUFFER_THRESHOLD_BYTES` (default 10 MB) of input were read.
    #[serde(default)]
    pub batch_size: Option<usize>,
    /// A batch also closes once this many input bytes were read (compressed bytes for gzip).
    /// Default: `BUFFER_THRESHOLD_BYTES`, else 10 MB.
    #[serde(default)]
    pub batch_size_bytes: Option<u64>,
    /// A batch also closes once it has been filling this many seconds (a slow read commits
    /// what it has). Default: `BUFFER_THRESHOLD_SECONDS`, else 60.
    #[serde(default)]
    pub batch_size_seconds: Option<u64>,
    /// Seconds a file read to its end must stay unchanged to count as finished. Default 3600.
    /// The checkpoint keeps an entry per file only up to about 32 KiB (some 250 files); past
    /// that, entries of files read to their end leave it below a watermark, finished files
    /// first, oldest path first. A file that changes after its entry left is read again from
    /// the start, with a warning (nothing is lost, its old records come twice): set this above
    /// the longest pause of files that are still appended to. A new file at any path is read.
    #[serde(default)]
    pub settle_secs: Option<u64>,
}

/// `S3` source: reads objects under a prefix, in key order, in the File source's formats
/// (detected per object; gzip). Each object is checkpointed by key and ETag with its byte or
/// row offset and whether it was read to its end; a rewritten object (new ETag) is reported,
/// not re-read. See "The S3 source" in docs/architecture.md.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct S3SourceConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Bucket name (not a URI).
    pub s3_bucket: String,
    /// Key prefix to read under. Default: the whole bucket.
    #[serde(default)]
    pub s3_prefix: Option<String>,
    /// AWS region. Default: from the standard AWS configuration chain.
    #[serde(default)]
    pub region: Option<String>,
    /// Endpoint URL of an S3-compatible service (also accepted as `endpoint_url`). Default:
    /// `AWS_ENDPOINT_URL`, else AWS.
    #[serde(default, alias = "endpoint_url")]
    pub endpoint: Option<String>,
    /// Record format. Default: detected per object, as for the File source.
    #[serde(default)]
    pub format: Option<InputFormat>,
    /// How each pass finds new objects. Default `start_after`: list only the keys after the
    /// newest key read to its end with no unfinished object before it (one LIST request per
    /// pass with nothing new), which suits keys that grow over time (dates, timestamps,
    /// zero-padded sequence numbers); an object added later under a key at or below that
    /// watermark is never read. `full`: list every key under the prefix each pass, for other
    /// key patterns.
    #[serde(default)]
    pub s3_listing: Option<S3Listing>,
    /// Levels of sub-prefixes (separated by `s3_delimiter`) listed one level at a time before
    /// the objects under each sub-prefix at that depth are listed, up to 8 sub-prefixes at
    /// once: a faster listing of a prefix with many date or tenant folders. The keys read and
    /// their order are the same as with one flat listing; a sub-prefix wholly at or below the
    /// `start_after` watermark costs no request. Default 0 (one flat listing); at most 16.
    #[serde(default)]
    pub s3_prefix_ordered_depth: Option<u32>,
    /// What separates the levels `s3_prefix_ordered_depth` walks. Default `/`.
    #[serde(default)]
    pub s3_delimiter: Option<String>,
    /// Records per batch (one Arrow record batch). Default 10000. A batch also closes once
    /// `BUFFER_THRESHOLD_BYTES` (default 10 MB) of input were read.
    #[serde(default)]
    pub batch_size: Option<usize>,
    /// A batch also closes once this many input bytes were read (compressed bytes for gzip).
    /// Default: `BUFFER_THRESHOLD_BYTES`, else 10 MB.
    #[serde(default)]
    pub batch_size_bytes: Option<u64>,
    /// A batch also closes once it has been filling this many seconds (a slow read commits
    /// what it has). Default: `BUFFER_THRESHOLD_SECONDS`, else 60.
    #[serde(default)]
    pub batch_size_seconds: Option<u64>,
}

/// How the S3 source lists a prefix each pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum S3Listing {
    /// Only keys after the watermark (`StartAfter`): for keys that grow over time.
    StartAfter,
    /// Every key under the prefix, every pass.
    Full,
}

/// `Stdin` source: records on standard input.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StdinSourceConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Record format: `jsonl` (default) or `json` (one JSON object per line), or `csv` (a
    /// header line, then one row per line).
    #[serde(default)]
    pub format: Option<InputFormat>,
    /// `batch` (default): read until standard input ends. `stream`: the same (the pass ends
    /// when the writer closes the pipe), accepted for the real product's configs; batches
    /// close by `batch_size_seconds` while the writer is slow, in either mode.
    #[serde(default)]
    pub mode: Option<StdinMode>,
    /// Records per batch. Default 10000.
    #[serde(default)]
    pub batch_size: Option<usize>,
    /// A batch also closes once this many bytes were read. Default: the pipeline's
    /// `buffer_threshold_bytes`, else `BUFFER_THRESHOLD_BYTES`, else 10 MB.
    #[serde(default)]
    pub batch_size_bytes: Option<u64>,
    /// A batch also closes once it has been filling this many seconds, so a slow writer's
    /// records are committed as they come. Default: the pipeline's
    /// `buffer_threshold_seconds`, else `BUFFER_THRESHOLD_SECONDS`, else 60.
    #[serde(default)]
    pub batch_size_seconds: Option<u64>,
}

/// How the Stdin source reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StdinMode {
    /// Until standard input ends.
    Batch,
    /// Until standard input ends, committing by time as records come.
    Stream,
}

// ---------------------------------------------------------------------------------------------
// Sinks
// ---------------------------------------------------------------------------------------------

connector_set! {
    /// A `data_sinks` connector.
    SinkConnector, section = "data_sinks", schema_sink = true, {
        /// Iceberg tables whose catalog pointers live in the state store. Exactly once.
        SkipprLake(SkipprLakeSinkConfig) = true,
        /// Iceberg tables in S3 registered in AWS Glue, queryable by Athena. Exactly once.
        AthenaIceberg(AthenaIcebergSinkConfig) = true,
        /// Iceberg tables on a local `file://` warehouse, readable by DuckDB. Exactly once.
        Duckdb(DuckdbSinkConfig) = true,
        /// PostgreSQL tables. Exactly once.
        Postgres(PostgresSinkConfig) = true,
        /// Parquet, JSON-lines or CSV files in S3 in the Hive layout. Overwrite on retry.
        S3(S3SinkConfig) = true,
        /// Parquet, JSON-lines or CSV files on local disk in the Hive layout. Overwrite on
        /// retry.
        File(FileSinkConfig) = true,
        /// Hive-partitioned Parquet in S3 registered in Glue. Overwrite on retry.
        Athena(AthenaSinkConfig) = true,
        /// Records printed to standard output as JSON lines (debugging; no guarantee).
        Stdout(StdoutSinkConfig) = true,
    }
}

connector_set! {
    /// A `deadletter_sinks` connector.
    DeadletterConnector, section = "deadletter_sinks", schema_sink = true, {
        /// Deadletter records as files on local disk: one file per WAL batch with rejected
        /// records, `{path}/{pipeline}/b{batch id, 20 digits}.jsonl` (or `.parquet`), written
        /// whole and renamed into place, so a retry replaces it. `skipprd deadletters replay`
        /// reads these files.
        File(FileSinkConfig) = true,
        /// Deadletter records as objects in S3: one object per WAL batch with rejected records,
        /// `s3://{s3_bucket}/{s3_prefix}/{pipeline}/b{batch id, 20 digits}.jsonl` (or
        /// `.parquet`), written by one PUT of the whole object, so a retry overwrites it.
        /// `skipprd deadletters replay` reads these objects (and moves each replayed one to
        /// `{pipeline}/replayed/`: a PUT there, then a DELETE).
        S3(S3SinkConfig) = true,
        /// Deadletter records in the Glue table `_dl_<pipeline>` (Hive, Parquet) of
        /// `glue_database_name`: one Parquet object per WAL batch with rejected records,
        /// `s3://{s3_bucket}/{s3_prefix}/_dl_{pipeline}/b{batch id, 20 digits}.parquet`, written by
        /// one PUT, so a retry overwrites it.
        Athena(AthenaSinkConfig) = true,
    }
}

connector_set! {
    /// A `schema_sinks` connector: where a sink's schema is written.
    SchemaSinkConnector, section = "schema_sinks", schema_sink = false, {
        /// Schema files on local disk.
        File(FileSchemaSinkConfig) = false,
        /// Schema objects in S3.
        S3(S3SchemaSinkConfig) = false,
        /// The schema as Glue table definitions (one table per namespace), for an `Athena`
        /// data sink: `discover` creates or updates them without writing rows.
        Glue(GlueSchemaSinkConfig) = true,
        /// The paired schema sink of an `AthenaIceberg` data sink: must equal it (the tables
        /// are the sink's own Iceberg tables, registered in Glue).
        AthenaIceberg(AthenaIcebergSinkConfig) = true,
        /// The paired schema sink of a `Duckdb` data sink: must equal it.
        Duckdb(DuckdbSinkConfig) = true,
        /// The paired schema sink of a `SkipprLake` data sink: must equal it.
        SkipprLake(SkipprLakeSinkConfig) = true,
    }
}

/// `SkipprLake` sink.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkipprLakeSinkConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Warehouse root: `s3://bucket/prefix` or `file://path`.
    pub warehouse: String,
    /// Where the catalog pointers live. On an `s3://` warehouse: the DynamoDB table (keys `pk`,
    /// `sk`, as made by `skipprd store create`; may be the state store's own table), items in
    /// the partition `catalog#{warehouse}`; default: the state store's table when
    /// `skippr.store.type` is `dynamodb`, required otherwise. On a `file://` warehouse: the
    /// name of the embedded store file `{warehouse}/_skippr_catalog/{catalog_table}.redb`,
    /// default `catalog`.
    #[serde(default)]
    pub catalog_table: Option<String>,
    /// Iceberg namespace; tables live at `{warehouse}/{table_namespace}/{table}`. Default `default`.
    #[serde(default)]
    pub table_namespace: Option<String>,
    /// AWS region for an `s3://` warehouse.
    #[serde(default)]
    pub region: Option<String>,
    /// Where the warehouse's files live: a kind (`s3`, `file`), or a map
    /// `{type: s3 | r2 | file, endpoint, access_key_id, secret_access_key, path_style}` for an
    /// S3-compatible store (Cloudflare R2, MinIO) with keys of its own; the keys are secrets
    /// (`${NAME}` references). The catalog pointers stay in DynamoDB (`catalog_table`).
    /// Default: from the warehouse URI scheme, with the AWS configuration chain.
    #[serde(default)]
    pub object_store: Option<ObjectStoreSetting>,
}

/// A `SkipprLake` sink's `object_store`: a kind alone, or a map with the endpoint and keys.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(
    untagged,
    expecting = "an object store kind (`s3`, `file`) or a map `{type: s3 | r2 | file, endpoint, access_key_id, secret_access_key, path_style}`"
)]
pub enum ObjectStoreSetting {
    /// `object_store: s3`.
    Kind(ObjectStoreKind),
    /// `object_store: {type: r2, endpoint: ..., access_key_id: ${R2_KEY}, ...}`.
    Map(ObjectStoreMap),
}

/// The map form of `object_store`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectStoreMap {
    /// `s3`, `r2` (Cloudflare R2: S3's API at the account's endpoint) or `file`.
    #[serde(rename = "type")]
    pub store_type: ObjectStoreType,
    /// The S3 API endpoint (`https://<account>.r2.cloudflarestorage.com`, a MinIO URL).
    /// Required for `r2`. Default for `s3`: `AWS_ENDPOINT_URL`, else AWS.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Access key id for the store (a secret: `${NAME}`); with `secret_access_key`.
    /// Default: the AWS configuration chain.
    #[serde(default)]
    pub access_key_id: Option<Secret>,
    /// Secret access key for the store (a secret: `${NAME}`); with `access_key_id`.
    #[serde(default)]
    pub secret_access_key: Option<Secret>,
    /// `true`: path-style requests (`https://endpoint/bucket/key`), `false`: virtual-hosted
    /// (`https://bucket.endpoint/key`). Default: path-style with an endpoint, else AWS's.
    #[serde(default)]
    pub path_style: Option<bool>,
}

/// The `type` of an `object_store` map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ObjectStoreType {
    /// Amazon S3 or an S3-compatible endpoint.
    S3,
    /// Cloudflare R2 (S3's API; needs `endpoint`).
    R2,
    /// The local file system.
    File,
}

impl ObjectStoreSetting {
    /// Whether the files are in an S3-compatible store (else on local disk).
    pub fn is_s3(&self) -> bool {
        match self {
            ObjectStoreSetting::Kind(k) => *k == ObjectStoreKind::S3,
            ObjectStoreSetting::Map(m) => m.store_type != ObjectStoreType::File,
        }
    }
}

/// `AthenaIceberg` sink: Iceberg tables in S3, each registered in Glue (`table_type=ICEBERG`,
/// `metadata_location`), queryable by Athena. Exactly once. Tables are maintained as on local
/// warehouses (expiry, compaction, deleting unreferenced objects) with the default maintenance
/// settings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AthenaIcebergSinkConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Warehouse root, `s3://bucket/prefix`; tables live at `{warehouse}/{glue_database_name}/{table}`.
    pub warehouse: String,
    /// Glue database the tables are registered in: lowercase letters, digits and `_`. Created when missing.
    pub glue_database_name: String,
    /// Athena workgroup for queries. Default `primary`.
    #[serde(default)]
    pub athena_workgroup_name: Option<String>,
    /// Bucket name (not a URI) for Athena query results.
    #[serde(default)]
    pub athena_results_s3_bucket: Option<String>,
    /// AWS region. Default: the environment's (`AWS_REGION`, the profile).
    #[serde(default)]
    pub region: Option<String>,
    /// Glue catalog id (AWS account id). Default: the caller's account.
    #[serde(default)]
    pub catalog_id: Option<String>,
    /// Object store kind: only `s3`. Default `s3`.
    #[serde(default)]
    pub object_store: Option<ObjectStoreKind>,
}

/// `Duckdb` sink: Iceberg tables on a local warehouse in the Hadoop layout.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DuckdbSinkConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Warehouse root, `file://path` (relative paths against the config file's directory).
    pub warehouse: String,
    /// Iceberg namespace; tables live at `{warehouse}/{table_namespace}/{table}`. Default `default`.
    #[serde(default)]
    pub table_namespace: Option<String>,
    /// Maintain tables after deliveries (expire snapshots, compact small files, delete unreferenced files) when a threshold is crossed. `skipprd maintain` runs it on demand either way. Default `true`.
    #[serde(default)]
    pub auto_maintenance: Option<bool>,
    /// Snapshots always kept per table, newest first (at least 1: the current one). Default 20.
    #[serde(default)]
    pub snapshot_retain_last: Option<u32>,
    /// Snapshots that were current within this many minutes are kept too (readers of them find every file). Default 360 (6 hours).
    #[serde(default)]
    pub snapshot_max_age_minutes: Option<u64>,
    /// Compaction writes data files of about this size (MiB); files under half of it are small (two larger ones would make a file over it). Default 32.
    #[serde(default)]
    pub compact_target_file_mb: Option<u64>,
    /// After a delivery, compact a table once it has more than this many small data files. Default 16.
    #[serde(default)]
    pub compact_min_files: Option<u32>,
    /// Files no snapshot references (of a crashed delivery) are deleted once this many minutes old. Default 1440 (24 hours); keep it well above the longest delivery.
    #[serde(default)]
    pub orphan_min_age_minutes: Option<u64>,
    /// Old `vN.metadata.json` versions kept besides the current one. Default 20.
    #[serde(default)]
    pub metadata_retain_versions: Option<u64>,
}

/// `Postgres` sink: one table per namespace in `schema` (named by the naming policy, always
/// quoted), created and evolved from the pipeline's schema; exactly once by WAL batch id (each
/// delivery is one transaction that records the batches it landed in `_skippr_batches`).
/// Either `connection_string`, or `host`, `user` and `database`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostgresSinkConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Server host name or address. Required unless `connection_string` is given.
    #[serde(default)]
    pub host: Option<String>,
    /// Server port. Default 5432.
    #[serde(default)]
    pub port: Option<u16>,
    /// Database name. Required unless `connection_string` is given.
    #[serde(default)]
    pub database: Option<String>,
    /// User name. Required unless `connection_string` is given.
    #[serde(default)]
    pub user: Option<String>,
    /// Password: a `${NAME}` reference.
    #[serde(default)]
    pub password: Option<Secret>,
    /// A libpq connection string (`postgresql://user:pass@host:port/db` or `host=... dbname=...`):
    /// a `${NAME}` reference. When given it overrides `host`, `port`, `user`, `password`,
    /// `database` and `sslmode`.
    #[serde(default)]
    pub connection_string: Option<Secret>,
    /// Schema to write tables into (created when missing). Default `public`.
    #[serde(default)]
    pub schema: Option<String>,
    /// libpq `sslmode`: `disable` (never TLS), `prefer` (default: TLS when the server offers
    /// it, else plain), `require` (always TLS, the certificate not checked) or `verify-full`
    /// (always TLS, the certificate's chain checked against `sslrootcert` or the system's roots,
    /// and its names against the host).
    #[serde(default)]
    pub sslmode: Option<PgSslMode>,
    /// A PEM file of the CA certificates `sslmode: verify-full` trusts (libpq's
    /// `sslrootcert`), e.g. Amazon RDS's `global-bundle.pem`. Default: the system's trusted
    /// roots. Only with `verify-full` (in `sslmode` or the connection string).
    #[serde(default)]
    pub sslrootcert: Option<std::path::PathBuf>,
}

/// `S3` sink (data or deadletters).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct S3SinkConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Bucket name (not a URI).
    pub s3_bucket: String,
    /// Key prefix to write under. Default: the bucket root.
    #[serde(default)]
    pub s3_prefix: Option<String>,
    /// AWS region.
    #[serde(default)]
    pub region: Option<String>,
    /// Endpoint URL of an S3-compatible service (also accepted as `endpoint_url`). Default:
    /// `AWS_ENDPOINT_URL`, else AWS.
    #[serde(default, alias = "endpoint_url")]
    pub endpoint: Option<String>,
    /// File format: `parquet` (zstd), `jsonl` or `csv`. Default `parquet` (`jsonl` for
    /// deadletters).
    #[serde(default)]
    pub format: Option<OutputFormat>,
}

/// `File` sink (data or deadletters).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSinkConfig {
    /// Output directory (relative paths against the config file's directory). Also accepted
    /// as `path` (the older key of the deadletter `File` sink).
    #[serde(alias = "path")]
    pub output_dir: String,
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// File format: `parquet` (zstd), `jsonl` or `csv`. Default `parquet` (`jsonl` for
    /// deadletters).
    #[serde(default)]
    pub format: Option<OutputFormat>,
}

/// `Athena` sink: Hive-partitioned Parquet under `s3://{s3_bucket}/{s3_prefix}/{table}/`, one
/// Glue table per namespace (`EXTERNAL_TABLE`, Parquet SerDe), partitions registered with
/// `BatchCreatePartition`. Overwrite on retry.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AthenaSinkConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Bucket name (not a URI) the Parquet files go to.
    pub s3_bucket: String,
    /// Key prefix the tables live under (`{s3_prefix}/{table}/`).
    pub s3_prefix: String,
    /// Glue database the tables are registered in (lowercase letters, digits, `_`; created
    /// when missing). Default: the `glue_database_name` of the sink's `Glue` schema sink;
    /// required when it has none, and equal to it when both name one.
    #[serde(default)]
    pub glue_database_name: Option<String>,
    /// Athena workgroup for `query --engine athena`. Default `primary`.
    #[serde(default)]
    pub athena_workgroup_name: Option<String>,
    /// Bucket name (not a URI) for Athena query results.
    #[serde(default)]
    pub athena_results_s3_bucket: Option<String>,
    /// File format: only `parquet` (zstd), what the Glue tables declare. Default `parquet`.
    #[serde(default)]
    pub format: Option<OutputFormat>,
    /// AWS region. Default: the environment's (`AWS_REGION`, the profile).
    #[serde(default)]
    pub region: Option<String>,
    /// Glue catalog id (AWS account id). Default: the caller's account.
    #[serde(default)]
    pub catalog: Option<String>,
    /// The most Parquet file uploads in flight at once during a delivery (1 to 64; memory:
    /// that many encoded files). Default 4.
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// Seconds a table's Glue definition, once read or written, is trusted before it is read
    /// again: a delivery whose columns the table is known to have then sends no Glue request
    /// (across the passes of one `sync` and the invocations of a warm Lambda). A new column
    /// always reads the table. Default: read at every delivery (0 too).
    #[serde(default)]
    pub discovery_cache_ttl_secs: Option<u64>,
}

/// `Stdout` sink.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StdoutSinkConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Output format: only `jsonl` (JSON lines, one object per row); for CSV or Parquet
    /// files use the `File` sink. Default `jsonl`.
    #[serde(default)]
    pub format: Option<OutputFormat>,
}

/// `File` schema sink.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSchemaSinkConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Directory the schema files are written to.
    pub path: String,
}

/// `S3` schema sink.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct S3SchemaSinkConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Bucket name (not a URI).
    pub s3_bucket: String,
    /// Key prefix. Default: the bucket root.
    #[serde(default)]
    pub s3_prefix: Option<String>,
    /// AWS region.
    #[serde(default)]
    pub region: Option<String>,
}

/// `Glue` schema sink: the pipeline's schema as Glue table definitions (one per namespace,
/// the layout of an `Athena` data sink). Keys an `Athena` sink also has must agree with it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlueSchemaSinkConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// Glue database the table definitions go to (lowercase letters, digits, `_`; created
    /// when missing).
    pub glue_database_name: String,
    /// Bucket name (not a URI) of the tables' data. Default: the `Athena` data sink's.
    #[serde(default)]
    pub s3_bucket: Option<String>,
    /// Key prefix of the tables' data. Default: the `Athena` data sink's.
    #[serde(default)]
    pub s3_prefix: Option<String>,
    /// AWS region. Default: the data sink's, else the environment's.
    #[serde(default)]
    pub region: Option<String>,
    /// Glue catalog id (AWS account id). Default: the data sink's, else the caller's account.
    #[serde(default)]
    pub catalog: Option<String>,
    /// Athena workgroup. Default: the data sink's, else `primary`.
    #[serde(default)]
    pub athena_workgroup_name: Option<String>,
    /// Bucket name (not a URI) for Athena query results. Default: the data sink's.
    #[serde(default)]
    pub athena_results_s3_bucket: Option<String>,
}
