//! `skippr.yml`: discovery, parsing, environment substitution and validation.
//!
//! Three steps, kept apart (parse, then validate, then build in the commands):
//!
//! 1. [`load()`] finds the file, parses it into the typed [`Config`] (serde, every struct
//!    `deny_unknown_fields`) and substitutes `${NAME}` references from the environment and the
//!    `.env` files beside it. Unknown keys fail here, with the file, the key path, the line
//!    and column, and a "did you mean" suggestion.
//! 2. [`validate()`] is pure (no file system, network or clock): it resolves references,
//!    checks names, applies environment fallbacks and defaults, and returns a
//!    [`validate::ValidatedConfig`] that the commands use.
//! 3. The commands build connectors from the validated values and do the I/O.
//!
//! The doc comment on every field below is its reference documentation: `docs/config.md` is
//! generated from them ([`reference::markdown`]) and a test fails when it is stale.

pub mod connectors;
pub mod credentials;
pub mod env;
pub mod error;
pub mod http;
pub mod load;
pub mod postgres;
pub mod reference;
pub mod secret;
pub mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

pub use connectors::{
    ConnectorSet, DeadletterConnector, Entry, SchemaSinkConnector, SinkConnector, SourceConnector,
};
pub use env::ProcessEnv;
pub use error::ConfigError;
pub use load::{ConfigSource, LoadedConfig, discover_config_file, load, load_file, load_text};
pub use secret::Secret;
pub use validate::{ValidatedConfig, ValidatedPipeline, validate};

/// The whole project file.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Project-wide settings: identity, where schemas and state live.
    #[serde(default, deserialize_with = "null_as_default")]
    pub skippr: SkipprSettings,
    /// Pipelines by name: each reads one source and writes to at most one destination.
    /// Names may not contain dots and may not be `deadletters`, `wal`, `_skippr`, `skippr`
    /// or `metadata`.
    #[serde(default, deserialize_with = "unique_names")]
    pub pipelines: BTreeMap<String, PipelineConfig>,
    /// Sources by logical name: each maps to exactly one connector type.
    #[serde(default, deserialize_with = "unique_names")]
    pub data_sources: BTreeMap<String, Entry<SourceConnector>>,
    /// Destinations by logical name: each maps to exactly one connector type, plus an optional
    /// `schema_sink` reference.
    #[serde(default, deserialize_with = "unique_names")]
    pub data_sinks: BTreeMap<String, Entry<SinkConnector>>,
    /// Where rejected records go, by logical name.
    #[serde(default, deserialize_with = "unique_names")]
    pub deadletter_sinks: BTreeMap<String, Entry<DeadletterConnector>>,
    /// Where sinks' schemas are written, by logical name.
    #[serde(default, deserialize_with = "unique_names")]
    pub schema_sinks: BTreeMap<String, Entry<SchemaSinkConnector>>,
    /// Accepted for compatibility with the original product and ignored.
    #[serde(default)]
    #[schemars(skip)]
    pub dbt: Option<serde::de::IgnoredAny>,
    /// Accepted for compatibility with the original product and ignored.
    #[serde(default)]
    #[schemars(skip)]
    pub vector_sources: Option<serde::de::IgnoredAny>,
}

/// The `skippr` section.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkipprSettings {
    /// Workspace name; with the tenant and the pipeline name it is the identity of saved
    /// progress, so renaming it starts every pipeline from the beginning. Default: env
    /// `WORKSPACE_NAME`, else `default`.
    #[serde(default)]
    pub workspace: Option<String>,
    /// Tenant name, the outermost part of the identity. Default: env `TENANT`, else `default`.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Where schemas are saved: `local` (`<data_dir>/<workspace>_<pipeline>/schema.json`) or
    /// `s3` (the object `schemas/{tenant}/{workspace}/{pipeline}/schema.json` in
    /// `skippr_s3_bucket`, the same bytes as the local file). Default: env
    /// `SKIPPRD_EL_STORAGE_MODE`, else `s3` when a skippr bucket is configured, else `local`.
    #[serde(default)]
    pub skipprd_el_storage_mode: Option<StorageMode>,
    /// Metadata bucket (a bucket name); also the WAL bucket when `WAL_STORAGE=s3` and no
    /// `wal_s3_bucket` is set. Default: env `SKIPPR_S3_BUCKET`.
    #[serde(default)]
    pub skippr_s3_bucket: Option<String>,
    /// Dedicated WAL bucket for `WAL_STORAGE=s3`. Default: env `SKIPPR_WAL_S3_BUCKET`, else
    /// `skippr_s3_bucket`.
    #[serde(default)]
    pub wal_s3_bucket: Option<String>,
    /// The state store: resume positions, acknowledgements, schema versions, the writer lease.
    #[serde(default)]
    pub store: Option<StoreConfig>,
    /// `true` makes `sync` SIGKILL itself at a random moment 15-60 s into a run, to prove
    /// recovery. Default: env `SKIPPR_CHAOS_MODE=yes`, else off.
    #[serde(default)]
    pub chaos_mode: Option<bool>,
}

/// Where schemas are saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StorageMode {
    /// Under the pipeline's data directory.
    Local,
    /// In the skippr bucket, `schemas/{tenant}/{workspace}/{pipeline}/schema.json`.
    S3,
}

/// The `skippr.store` section.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `sled`: the embedded local store (default; the name is kept for compatibility);
    /// `dynamodb`: one DynamoDB table, with an expiring writer lease (TTL: env
    /// `SKIPPR_LEASE_TTL_SECONDS`, default 30; every AWS request's timeouts follow it: TTL/2
    /// per operation, TTL/4 per attempt, at least 5 s and 2 s, so raise it for a slow link to
    /// S3). `cloud-tables` is recognised and rejected.
    #[serde(rename = "type")]
    pub store_type: StoreType,
    /// DynamoDB table name, when `type` is `dynamodb`. Never created implicitly: create it
    /// with `skipprd store create` (or keys `pk` (S) and `sk` (S) in your infrastructure).
    #[serde(default)]
    pub name: Option<String>,
}

/// The kind of state store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StoreType {
    /// The embedded local store.
    Sled,
    /// A DynamoDB table.
    Dynamodb,
    /// Recognised for compatibility; not supported.
    CloudTables,
}

/// One pipeline.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// The source: `data_sources.<name>`.
    pub data_source: String,
    /// The destination: `data_sinks.<name>`. Without it the WAL is the dataset and nothing is
    /// reclaimed.
    #[serde(default)]
    pub data_sink: Option<String>,
    /// Where rejected records go: `deadletter_sinks.<name>`. Without it they are counted and
    /// logged.
    #[serde(default)]
    pub deadletter_sink: Option<String>,
    /// Older placement of a sink's `schema_sinks.<name>` reference; still accepted.
    #[serde(default)]
    pub schema_sink: Option<String>,
    /// `true` makes a `sync` that runs this pipeline SIGKILL itself at a random moment 15-60 s
    /// into the run, to prove recovery (as `skippr.chaos_mode`, for one pipeline). Default:
    /// `skippr.chaos_mode`.
    #[serde(default)]
    pub chaos_mode: Option<bool>,
    /// Seconds between the starts of two `sync` passes when not run with `--once`. Default: the
    /// `HttpClient` source's `scrape_interval_seconds` when it has one, else `SYNC_FREQUENCY`,
    /// else 900.
    #[serde(default)]
    pub sync_frequency_seconds: Option<u64>,
    /// A batch closes once this many input bytes were read, for this pipeline's source (a
    /// source's own `batch_size_bytes` wins). Default: `BUFFER_THRESHOLD_BYTES`, else 10 MB.
    #[serde(default)]
    pub buffer_threshold_bytes: Option<u64>,
    /// A batch of this pipeline's File, S3 or HttpClient source also closes once it has been
    /// filling this many seconds (a source's own `batch_size_seconds` wins). Default:
    /// `BUFFER_THRESHOLD_SECONDS`, else 60.
    #[serde(default)]
    pub buffer_threshold_seconds: Option<u64>,
    /// Change data capture, passed to a source that can stream changes: a mode
    /// (`snapshot`, `snapshot_then_cdc`, `cdc_only`) or a map `{mode, slot_name, publication}`;
    /// wins over the Postgres source's `cdc_mode`, `replication_slot_name` and
    /// `publication_name`. `snapshot` is the source's bounded (incremental) read; the other two
    /// stream changes by logical replication. Any `cdc` on a source that cannot capture
    /// changes is refused naming the source.
    #[serde(default)]
    pub cdc: Option<CdcSetting>,
    /// Directory for the WAL, resume positions and (in local storage mode) the schema; the
    /// pipeline uses `<data_dir>/<workspace>_<pipeline>/`. Relative paths are resolved against
    /// the config file's directory. Default: env `DATA_DIR` (relative to the current
    /// directory, like any path in a variable), else `./data` beside the config file. A
    /// `File` source never reads input under it (the pipeline's own WAL and state are there):
    /// a `path` whose files are all under it is refused with an error naming the directory;
    /// keep inputs elsewhere, or set `data_dir` to another directory.
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// How records are routed to namespaces (tables) and shaped.
    #[serde(default)]
    pub transform: Option<TransformConfig>,
    /// How a delivery's rows meet the table's: `append` (default), `merge_by_key` (the newest
    /// version of each `primary_key` by source order), `replace_table` (each read's rows
    /// replace the table, atomically) or `replace_partition` (each read's rows replace the
    /// partitions they fall in; needs `transform.batch_partition_fields` or
    /// `batch_time_fields`); or `{default: <policy>, namespaces: {<namespace>: <policy>}}`. A
    /// read is what a pass reads from the source up to its end (a pass stopped or failed
    /// part-way is continued by the next); a read with no rows for a table leaves it as it is.
    /// With either replace policy every table of the pipeline is delivered at the end of each
    /// read, never part-way. A destination that cannot apply a declared policy fails
    /// validation naming both: `Duckdb`, `SkipprLake` and `AthenaIceberg` apply every policy
    /// (Iceberg tables by copy-on-write), `Postgres` `append`, `merge_by_key` and
    /// `replace_table`, every other destination `append`.
    /// Under `merge_by_key` a record whose `_op` is `d` deletes its key and one whose `_op`
    /// is `t` empties the table (as the Postgres source's change stream writes them). Under a
    /// declared `merge_by_key`, a record with no value of its own in a `primary_key` column
    /// (null or missing, an object or an array, or a value its key column cannot hold, which
    /// typing would put in a sibling column such as `id_string` and leave the key NULL) is
    /// never merged: it is a `bad_key` deadletter naming the column, counted with the pass's
    /// rejected records (merged, all such records would share one NULL key and replace each
    /// other); a truncate (`_op` `t`) names no key and is taken. A key is compared as stored
    /// in its column (a `string` key column holds `2` as `"2"`, a `double` one the numeric
    /// string `"2"` as 2), and inference keeps a key column scalar (objects and arrays go to
    /// its siblings). Unset, with a Postgres source streaming changes (CDC) into a
    /// destination that merges: each table with a primary key merges by it, deletes applied
    /// (declare `append` to keep the change log instead).
    #[serde(default)]
    pub write_policy: Option<WritePolicyConfig>,
    /// The key columns `merge_by_key` merges on (a name, or a list). Required by a declared
    /// `merge_by_key`. Every record of a merged table needs a value of its own in each (see
    /// `write_policy`): one without is a `bad_key` deadletter.
    #[serde(default, deserialize_with = "postgres::one_or_many")]
    pub primary_key: Option<Vec<String>>,
}

/// How a delivery's rows meet a table's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WritePolicy {
    /// Every row is added (the default).
    Append,
    /// The newest version of each key (by source order) replaces the table's row of that key.
    MergeByKey,
    /// Each read's rows replace the table atomically (a read that has no rows for the
    /// table leaves it as it is).
    ReplaceTable,
    /// Each read's rows replace the partitions they fall in; the table's other partitions
    /// stay.
    ReplacePartition,
}

impl WritePolicy {
    /// The policy's name as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            WritePolicy::Append => "append",
            WritePolicy::MergeByKey => "merge_by_key",
            WritePolicy::ReplaceTable => "replace_table",
            WritePolicy::ReplacePartition => "replace_partition",
        }
    }

    /// Whether the policy replaces rows by whole reads (`replace_table`,
    /// `replace_partition`).
    pub fn replaces(self) -> bool {
        matches!(
            self,
            WritePolicy::ReplaceTable | WritePolicy::ReplacePartition
        )
    }
}

/// `write_policy`: one policy for every namespace, or a default and per-namespace ones.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum WritePolicyConfig {
    /// One policy for every namespace.
    One(WritePolicy),
    /// Per namespace.
    PerNamespace(WritePolicyMap),
}

/// `write_policy` per namespace.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WritePolicyMap {
    /// The policy of namespaces not listed. Default `append`.
    #[serde(default)]
    pub default: Option<WritePolicy>,
    /// Policies by namespace (the namespace value, before the naming policy).
    #[serde(default)]
    pub namespaces: std::collections::BTreeMap<String, WritePolicy>,
}

/// The `transform` section of a pipeline. Each key also reads `TRANSFORM_<KEY>` from the
/// environment when absent (for example `TRANSFORM_NAMESPACE_FIELDS`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransformConfig {
    /// Field (dot path) whose value names the namespace, i.e. the table, of each record; a
    /// comma list makes a composite name (values joined by `_`). Default: one namespace named
    /// after the pipeline.
    #[serde(default)]
    pub namespace_fields: Option<FieldList>,
    /// `true`: nested objects become dotted top-level columns (`a.b.c`). Default `false`.
    /// Also written `yes`/`no` (as the real product's files do).
    #[serde(default, deserialize_with = "flag")]
    pub flatten_events: Option<bool>,
    /// Fields (dot paths) to partition by: Hive partitions for Hive/S3/File sinks, the
    /// partition spec for Iceberg sinks.
    #[serde(default)]
    pub batch_partition_fields: Option<FieldList>,
    /// Time fields (dot paths, unix seconds or milliseconds); the first one present in a
    /// record partitions it by `batch_time_unit`.
    #[serde(default)]
    pub batch_time_fields: Option<FieldList>,
    /// Granularity of time partitions.
    #[serde(default)]
    pub batch_time_unit: Option<TimeUnit>,
    /// Fields (dot paths) to sort rows by within each Parquet file; fields missing from a
    /// namespace are ignored, with a warning once per run.
    #[serde(default)]
    pub batch_order_fields: Option<FieldList>,
    /// Dot path of the records inside each record read (`data.items`): an array there gives
    /// one record per element, an object one record; a record read without it becomes a
    /// `not_an_object` deadletter naming the path. Default: the records are the records read.
    #[serde(default)]
    pub record_field_path: Option<String>,
    /// Fields set to these values in every record (after `record_field_path`), replacing a
    /// value the record had under the same key: `{env: prod, source_system: crm}`.
    #[serde(default)]
    pub inject_fields: Option<BTreeMap<String, serde_json::Value>>,
    /// The values a `batch_partition_fields` partition may take (a comma list or a YAML
    /// list): a row whose value is not one of them lands in the partition `_other`, its
    /// value kept in the row, which bounds the directories untrusted values can make. For
    /// the `File` and `S3` destinations (whose files keep the partition column); refused on
    /// others, where the partition holds the column's only copy. Default: every value.
    #[serde(default)]
    pub partition_allowed_values: Option<FieldList>,
    /// The name of the time partition key (the directory's `name=` and the partition
    /// column), in place of `{first batch_time_fields path}_{unit}` (`ts_day`): letters,
    /// digits and `_`, not starting with a digit, at most 128 bytes. Needs
    /// `batch_time_fields`.
    #[serde(default)]
    pub time_partition_prefix: Option<String>,
    /// `true`: a JSON record that is not strict JSON is read again allowing strings in
    /// single quotes (`{'a': 'b'}`) before it is deadlettered (File and S3 sources). Default
    /// `false`.
    #[serde(default, deserialize_with = "flag")]
    pub enable_single_quote_parsing: Option<bool>,
    /// `true`: a JSON record that is not strict JSON is read again with bytes that are not
    /// UTF-8 and lone surrogate escapes as U+FFFD, and raw control characters in strings as
    /// if escaped, before it is deadlettered (File and S3 sources). Default `false`.
    #[serde(default, deserialize_with = "flag")]
    pub enable_unicode_parsing: Option<bool>,
}

/// A yes/no value: a YAML boolean, or `true`/`false`, `yes`/`no`, `1`/`0` as text (as the
/// real product's files write them).
fn flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Bool(bool),
        Text(String),
        Number(u64),
    }
    match Option::<Raw>::deserialize(deserializer)? {
        None => Ok(None),
        Some(Raw::Bool(b)) => Ok(Some(b)),
        Some(Raw::Number(1)) => Ok(Some(true)),
        Some(Raw::Number(0)) => Ok(Some(false)),
        Some(Raw::Text(t)) => match t.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" | "on" => Ok(Some(true)),
            "false" | "no" | "0" | "off" => Ok(Some(false)),
            _ => Err(serde::de::Error::custom(format!(
                "'{t}' is not yes/no (true, false, yes, no, 1, 0)"
            ))),
        },
        Some(Raw::Number(n)) => Err(serde::de::Error::custom(format!(
            "{n} is not yes/no (true, false, yes, no, 1, 0)"
        ))),
    }
}

/// A pipeline's `cdc` value: a mode alone, or a map with the mode and its options.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(
    untagged,
    expecting = "a CDC mode (`snapshot`, `snapshot_then_cdc`, `cdc_only`) or a map `{mode, slot_name, publication}`"
)]
pub enum CdcSetting {
    /// `cdc: snapshot_then_cdc`.
    Mode(CdcMode),
    /// `cdc: {mode: snapshot_then_cdc, slot_name: skippr_orders}`.
    Options(CdcOptions),
}

impl CdcSetting {
    /// The mode, in either form.
    pub fn mode(&self) -> CdcMode {
        match self {
            CdcSetting::Mode(m) => *m,
            CdcSetting::Options(o) => o.mode,
        }
    }
}

/// The map form of `cdc`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CdcOptions {
    /// How changes are read.
    pub mode: CdcMode,
    /// Logical replication slot name (wins over the source's `replication_slot_name`).
    /// Default: `skipprd_{pipeline}`.
    #[serde(default)]
    pub slot_name: Option<String>,
    /// Publication to stream (wins over the source's `publication_name`). Default
    /// `skipprd_{pipeline}`, made for the pipeline's tables when missing.
    #[serde(default)]
    pub publication: Option<String>,
}

/// How a CDC-capable source reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CdcMode {
    /// A bounded snapshot only, no change stream (the Postgres source's incremental read).
    Snapshot,
    /// A snapshot, then the change stream, resumed from its position.
    SnapshotThenCdc,
    /// The change stream only, from the slot's position.
    CdcOnly,
}

/// Granularity of time partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimeUnit {
    /// One partition per year.
    Year,
    /// One partition per month.
    Month,
    /// One partition per day.
    Day,
    /// One partition per hour.
    Hour,
    /// One partition per minute.
    Minute,
}

/// A list of field paths, written as a comma-separated string or a YAML list.
#[derive(Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[schemars(with = "String")]
pub struct FieldList(pub Vec<String>);

impl FieldList {
    /// Parse a comma-separated list, trimming blanks and dropping empty items.
    pub fn parse(text: &str) -> Self {
        FieldList(
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }
}

impl<'de> Deserialize<'de> for FieldList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Text(String),
            List(Vec<String>),
        }
        Ok(match Repr::deserialize(deserializer)? {
            Repr::Text(text) => FieldList::parse(&text),
            Repr::List(items) => FieldList(
                items
                    .iter()
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect(),
            ),
        })
    }
}

/// A map of names, each defined once: YAML and JSON parsers keep the last of two equal keys
/// silently, which would drop a pipeline or connector without a word. `key:` with no value
/// (null) is an empty map.
fn unique_names<'de, D, V>(deserializer: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    use serde::de::{self, MapAccess, Visitor};
    use std::marker::PhantomData;

    struct Names<V>(PhantomData<V>);

    impl<'de, V: Deserialize<'de>> Visitor<'de> for Names<V> {
        type Value = BTreeMap<String, V>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of names")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_map(self)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut names = BTreeMap::new();
            while let Some(name) = map.next_key::<String>()? {
                if names.contains_key(&name) {
                    return Err(de::Error::custom(format!(
                        "`{name}` is defined twice; each name may be defined once"
                    )));
                }
                let value = map.next_value()?;
                names.insert(name, value);
            }
            Ok(names)
        }
    }

    deserializer.deserialize_option(Names(PhantomData))
}

/// `key:` with no value (YAML null) means the default, like an absent key.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}
