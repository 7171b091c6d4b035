//! Validation: pure checks that turn a [`LoadedConfig`] into a [`ValidatedConfig`].
//!
//! No file system, network or clock here: the environment comes in as a value, so the same
//! input always validates the same way. The first problem found is returned; its message names
//! the file and the key path.
//!
//! What a pipeline means is worked out here once, and the commands read it from the
//! [`ValidatedPipeline`]: its [`Destination`] (the lake location, maintenance settings and
//! layout; `destination.rs`), where its WAL and state live and what it needs of AWS
//! ([`WalLocation`], [`PipelineStore`], [`AwsSettings`]; `placement.rs`).

mod destination;
mod files;
mod http;
mod placement;
mod postgres;
mod settings;
mod stream;
#[cfg(test)]
mod tests;
mod transform;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use destination::{
    DEFAULT_TABLE_NAMESPACE, Destination, DestinationKind, LakeCatalog, LakeLocation, Layout,
    Maintenance, ObjectStoreAccess,
};
pub use files::{AthenaTarget, FileDestination, FileDestinationKind};
pub use placement::{AwsSettings, PipelineStore, WalLocation};
pub use stream::{ResolvedCdc, default_cdc_name};

use super::connectors::{
    ConnectorSet, DeadletterConnector, Entry, SchemaSinkConnector, SinkConnector, SourceConnector,
};
use super::env::Environment;
use super::error::{ConfigError, suggest};
use super::load::LoadedConfig;
use super::{FieldList, StorageMode, StoreType, TimeUnit, TransformConfig, WritePolicy};

/// Pipeline names that are reserved for skipprd's own use.
pub const RESERVED_PIPELINE_NAMES: &[&str] =
    &["deadletters", "wal", "_skippr", "skippr", "metadata"];

/// The deepest `s3_prefix_ordered_depth` accepted.
pub const MAX_S3_ORDERED_DEPTH: u32 = 16;

/// Default seconds between `sync` passes.
pub const DEFAULT_SYNC_FREQUENCY_SECONDS: u64 = 900;

/// Where the WAL lives (`WAL_STORAGE` / `--wal-storage`; never a YAML key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalStorage {
    /// Segment files under the pipeline's data directory (default).
    Disk,
    /// Objects in the WAL bucket.
    S3,
}

/// The resolved state store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// The embedded store under the pipeline's data directory (`type: sled`).
    Embedded,
    /// A DynamoDB table.
    Dynamodb {
        /// The table name.
        table: String,
    },
}

/// Project-wide settings with environment fallbacks and defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Tenant name.
    pub tenant: String,
    /// Workspace name.
    pub workspace: String,
    /// Where schemas are saved.
    pub storage_mode: StorageMode,
    /// The metadata bucket.
    pub skippr_s3_bucket: Option<String>,
    /// The WAL bucket when `WAL_STORAGE=s3`.
    pub wal_s3_bucket: Option<String>,
    /// The state store.
    pub store: StoreKind,
    /// Whether chaos mode is on.
    pub chaos_mode: bool,
    /// Where the WAL lives.
    pub wal_storage: WalStorage,
    /// A batch closes once this many input bytes were read (`BUFFER_THRESHOLD_BYTES`,
    /// default 10 MB).
    pub buffer_threshold_bytes: u64,
    /// Committed batches are delivered to the destination once they take this many bytes of
    /// WAL during a pass, beside reading, and at the end of every pass
    /// (`DELIVER_THRESHOLD_BYTES`, default 64 MiB).
    pub deliver_threshold_bytes: u64,
    /// The time to live of the DynamoDB writer lease, renewed every third of it
    /// (`SKIPPR_LEASE_TTL_SECONDS`, default 30 s). A crashed writer's lease is taken over once
    /// it has expired.
    pub lease_ttl: std::time::Duration,
    /// A batch of a File or S3 source closes once it has been filling this long
    /// (`BUFFER_THRESHOLD_SECONDS`, default 60 s; the source's `batch_size_seconds` wins).
    pub buffer_threshold_seconds: Duration,
    /// WAL segment size target (`WAL_BYTES_PER_FILE`; default 64 MiB, at least 4 MiB).
    pub wal_bytes_per_file: Option<u64>,
    /// How the disk WAL stores each batch's Arrow data (`WAL_COMPRESSION`: `lz4` or `none`;
    /// `none` is refused with `WAL_STORAGE=s3`); `None`: not set, so
    /// [`crate::wal::WalCompression::default_for`] decides per pipeline
    /// ([`ValidatedPipeline::wal_compression`]).
    pub wal_compression: Option<crate::wal::WalCompression>,
    /// During a pass, committed batches are also delivered once this long passed since the
    /// last delivery started, however few bytes they take (`WAL_MAX_DELAY_SECONDS`); `None`:
    /// at `DELIVER_THRESHOLD_BYTES` and at the end of the pass only.
    pub wal_max_delay: Option<Duration>,
    /// `RESET_METADATA=true`: `sync` forgets each pipeline's saved schema once, before its
    /// first pass, so the next pass infers it again (as `skipprd reset --schema`).
    pub reset_metadata: bool,
    /// Whether `sync` saves a schema change it meets by itself (`SCHEMA_AUTO_APPROVE`, default
    /// `true`). When `false`, a batch that would add a namespace or field, or widen a type,
    /// stops the pass before it is committed (nothing is lost: the source position stays),
    /// until `discover` or `metadata apply` saves the change.
    pub schema_auto_approve: bool,
    /// `RESET_OFFSETS=true`: `sync` resets each pipeline it runs (as `skipprd reset --yes`)
    /// once, before its first pass.
    pub reset_offsets: bool,
}

/// Values from the command line that override both their `skippr.*` key and their
/// environment variable (the CLI's global flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--wal-storage` (over `WAL_STORAGE`).
    pub wal_storage: Option<String>,
    /// `--wal-s3-bucket` (over `skippr.wal_s3_bucket`, `SKIPPR_WAL_S3_BUCKET`).
    pub wal_s3_bucket: Option<String>,
    /// `--skippr-s3-bucket` (over `skippr.skippr_s3_bucket`, `SKIPPR_S3_BUCKET`).
    pub skippr_s3_bucket: Option<String>,
    /// `--store-type` (over `skippr.store.type`, `SKIPPR_STORE_TYPE`).
    pub store_type: Option<String>,
    /// `--store-name` (over `skippr.store.name`, `SKIPPR_STORE_NAME`).
    pub store_name: Option<String>,
    /// `--workspace` (over `skippr.workspace`, `WORKSPACE_NAME`).
    pub workspace: Option<String>,
    /// `--tenant` (over `skippr.tenant`, `TENANT`).
    pub tenant: Option<String>,
    /// `--storage-mode` (over `skippr.skipprd_el_storage_mode`, `SKIPPRD_EL_STORAGE_MODE`).
    pub storage_mode: Option<String>,
}

/// Default of `DELIVER_THRESHOLD_BYTES`: 64 MiB.
pub const DEFAULT_DELIVER_THRESHOLD_BYTES: u64 = 64 << 20;

/// Default of `BUFFER_THRESHOLD_BYTES`.
pub const DEFAULT_BUFFER_THRESHOLD_BYTES: u64 = 10_000_000;

/// A pipeline's transform with environment fallbacks and defaults applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transform {
    /// Dot paths whose values name the namespace; empty: one namespace.
    pub namespace_fields: Vec<String>,
    /// Whether nested objects become dotted columns.
    pub flatten_events: bool,
    /// Partition fields.
    pub batch_partition_fields: Vec<String>,
    /// Time partition fields.
    pub batch_time_fields: Vec<String>,
    /// Time partition unit.
    pub batch_time_unit: Option<TimeUnit>,
    /// Sort fields.
    pub batch_order_fields: Vec<String>,
    /// `record_field_path` and `inject_fields`, applied as records leave the source.
    pub shape: crate::sources::shaped::Shape,
    /// The values partitions of `batch_partition_fields` may take; empty: any.
    pub partition_allowed_values: Vec<String>,
    /// The time partition key's name (`time_partition_prefix`); `None`: `{path}_{unit}`.
    pub time_partition_prefix: Option<String>,
    /// `enable_single_quote_parsing` and `enable_unicode_parsing`, for the JSON readers.
    pub leniency: crate::sources::file::Leniency,
}

/// A named, resolved connector.
#[derive(Debug, Clone)]
pub struct Named<C> {
    /// The logical name (`sample` for `data_sources.sample`).
    pub name: String,
    /// The connector.
    pub connector: C,
}

/// One pipeline, references resolved.
#[derive(Debug, Clone)]
pub struct ValidatedPipeline {
    /// The pipeline's name.
    pub name: String,
    /// Its source.
    pub source: Named<SourceConnector>,
    /// Its destination (`data_sink`), resolved; `None`: the WAL is the dataset.
    pub destination: Option<Destination>,
    /// Its overwrite-on-retry destination (`File`, `S3`, `Athena`, `Stdout`), resolved;
    /// `None` for a lake sink or none.
    pub files: Option<FileDestination>,
    /// Its `Postgres` destination (the sink's name and keys), or `None`.
    pub postgres: Option<Named<crate::config::connectors::PostgresSinkConfig>>,
    /// Its write policies, checked against its destination.
    pub write: WritePolicies,
    /// Its deadletter sink, if any.
    pub deadletter_sink: Option<Named<DeadletterConnector>>,
    /// Its schema sink, if any (from the sink entry, else the pipeline).
    pub schema_sink: Option<Named<SchemaSinkConnector>>,
    /// Time between the starts of two passes.
    pub sync_frequency: Duration,
    /// Whether a `sync` running this pipeline kills itself to prove recovery (the pipeline's
    /// `chaos_mode`, else the project's).
    pub chaos_mode: bool,
    /// A batch closes once this many input bytes were read (the pipeline's
    /// `buffer_threshold_bytes`, else [`Settings::buffer_threshold_bytes`]; a source's
    /// `batch_size_bytes` wins).
    pub buffer_threshold_bytes: u64,
    /// A batch closes once it has been filling this long (the pipeline's
    /// `buffer_threshold_seconds`, else [`Settings::buffer_threshold_seconds`]; a source's
    /// `batch_size_seconds` wins).
    pub buffer_threshold_seconds: Duration,
    /// How its disk WAL stores each batch's Arrow data: `WAL_COMPRESSION` when set, else
    /// [`crate::wal::WalCompression::default_for`] its WAL's place and whether it has a
    /// destination.
    pub wal_compression: crate::wal::WalCompression,
    /// The Postgres change stream (`snapshot_then_cdc` or `cdc_only`, from the pipeline's
    /// `cdc` or the source's `cdc_mode`); `None`: the source's own read (`snapshot`).
    pub cdc: Option<ResolvedCdc>,
    /// The data directory (the pipeline's own directory is [`Self::state_dir`]).
    pub data_dir: PathBuf,
    /// Routing and shaping of records.
    pub transform: Transform,
    /// Where its WAL lives.
    pub wal: WalLocation,
    /// Its part of the state store.
    pub store: PipelineStore,
    /// What its pass needs of AWS.
    pub aws: AwsSettings,
}

impl ValidatedPipeline {
    /// `<data_dir>/<workspace>_<pipeline>/`: the pipeline's WAL, positions and local schema.
    pub fn state_dir(&self, settings: &Settings) -> PathBuf {
        state_dir(&self.data_dir, settings, &self.name)
    }

    /// Where the schema is saved in local storage mode.
    pub fn schema_path(&self, settings: &Settings) -> PathBuf {
        self.state_dir(settings).join("schema.json")
    }
}

/// A pipeline's write policies: a default, per-namespace ones, and the merge key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WritePolicies {
    /// The policy of namespaces not in `namespaces`.
    pub default: Option<WritePolicy>,
    /// Policies by namespace.
    pub namespaces: BTreeMap<String, WritePolicy>,
    /// The merge key's columns (field names).
    pub primary_key: Vec<String>,
    /// No policy is declared and a Postgres source streams changes into a destination that
    /// merges (Postgres, or an Iceberg one): a namespace whose source table has a primary key
    /// merges by it (deletes applied), one without stays `append` (the change log).
    pub source_keys: bool,
}

impl WritePolicies {
    /// The policy of `namespace` (`append` unless declared).
    pub fn of(&self, namespace: &str) -> WritePolicy {
        self.namespaces
            .get(namespace)
            .copied()
            .or(self.default)
            .unwrap_or(WritePolicy::Append)
    }

    /// The key `namespace` merges on: the declared `primary_key` under `merge_by_key`, else
    /// (with [`Self::source_keys`]) its source table's key from `source_keys`; `None`:
    /// appended.
    pub fn merge_key<'k>(
        &'k self,
        namespace: &str,
        source_keys: &'k BTreeMap<String, Vec<String>>,
    ) -> Option<&'k Vec<String>> {
        match self.of(namespace) {
            WritePolicy::MergeByKey => Some(&self.primary_key),
            WritePolicy::Append if self.source_keys => source_keys.get(namespace),
            _ => None,
        }
    }

    /// The declared `merge_by_key` namespaces and their key, for typing (the keys of a
    /// change stream's source tables, [`Self::source_keys`], are not known before its
    /// delivery: its records carry their table's primary key).
    pub fn declared_merge_keys(&self) -> crate::schema::MergeKeys {
        crate::schema::MergeKeys {
            columns: self.primary_key.clone(),
            default: self.default == Some(WritePolicy::MergeByKey),
            namespaces: self
                .namespaces
                .iter()
                .map(|(ns, policy)| (ns.clone(), *policy == WritePolicy::MergeByKey))
                .collect(),
        }
    }

    /// Whether some namespace's table is replaced by whole reads (`replace_table`,
    /// `replace_partition`): the pass then marks the end of each read in the WAL, and the
    /// delivery takes a read's batches together, never part of one.
    pub fn replaces_reads(&self) -> bool {
        self.declared().any(WritePolicy::replaces)
    }

    /// Every policy declared.
    fn declared(&self) -> impl Iterator<Item = WritePolicy> + '_ {
        self.default
            .into_iter()
            .chain(self.namespaces.values().copied())
    }
}

/// `<data_dir>/<workspace>_<pipeline>/`.
fn state_dir(data_dir: &Path, settings: &Settings, pipeline: &str) -> PathBuf {
    data_dir.join(format!("{}_{pipeline}", settings.workspace))
}

/// A config that passed validation.
#[derive(Debug, Clone)]
pub struct ValidatedConfig {
    /// The file, for messages (or a note that there is none).
    pub file: String,
    /// Directory relative paths are resolved against.
    pub base_dir: PathBuf,
    /// Project-wide settings.
    pub settings: Settings,
    /// Pipelines by name.
    pub pipelines: BTreeMap<String, ValidatedPipeline>,
}

impl ValidatedConfig {
    /// The pipelines a command runs on: `name` if given, else every pipeline (at least one).
    pub fn pipelines_or_all(
        &self,
        name: Option<&str>,
    ) -> Result<Vec<&ValidatedPipeline>, ConfigError> {
        match name {
            Some(_) => Ok(vec![self.pipeline(name)?]),
            None if self.pipelines.is_empty() => Err(ConfigError::NoPipelines {
                file: self.file.clone(),
            }),
            None => Ok(self.pipelines.values().collect()),
        }
    }

    /// The pipeline a command runs on: `name` if given, else the only pipeline defined.
    pub fn pipeline(&self, name: Option<&str>) -> Result<&ValidatedPipeline, ConfigError> {
        match name {
            Some(name) => self
                .pipelines
                .get(name)
                .ok_or_else(|| ConfigError::PipelineNotDefined {
                    name: name.to_owned(),
                    file: self.file.clone(),
                    defined: self.pipelines.keys().cloned().collect(),
                }),
            None => match self.pipelines.len() {
                1 => self
                    .pipelines
                    .values()
                    .next()
                    .ok_or_else(|| unreachable_empty(self)),
                0 => Err(unreachable_empty(self)),
                count => Err(ConfigError::PipelineAmbiguous {
                    file: self.file.clone(),
                    count,
                    names: self
                        .pipelines
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                }),
            },
        }
    }
}

fn unreachable_empty(config: &ValidatedConfig) -> ConfigError {
    ConfigError::NoPipelines {
        file: config.file.clone(),
    }
}

/// Where a setting's value came from, so an error names what the user actually wrote.
enum Origin {
    /// A key path of the config file.
    Key(String),
    /// An environment variable or a command-line flag.
    Var(String),
}

/// Validate a loaded config. `wal_storage` is the `--wal-storage` flag, if given (else
/// `WAL_STORAGE` from the environment, else `disk`).
pub fn validate(
    loaded: &LoadedConfig,
    wal_storage: Option<&str>,
) -> Result<ValidatedConfig, ConfigError> {
    let overrides = Overrides {
        wal_storage: wal_storage.map(str::to_owned),
        ..Overrides::default()
    };
    validate_with(loaded, &overrides)
}

/// [`validate`] with every command-line override.
pub fn validate_with(
    loaded: &LoadedConfig,
    overrides: &Overrides,
) -> Result<ValidatedConfig, ConfigError> {
    let file = loaded
        .source
        .path()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("(no config file)"));
    let v = Validator {
        file: &file,
        env: loaded.env.as_ref(),
        base_dir: &loaded.base_dir,
    };
    let config = &loaded.config;

    for name in config.pipelines.keys() {
        v.check_name("pipelines", name)?;
        if RESERVED_PIPELINE_NAMES.contains(&name.as_str()) {
            return Err(v.bad_name(
                "pipelines",
                name,
                format!(
                    "is reserved (reserved names: {})",
                    RESERVED_PIPELINE_NAMES.join(", ")
                ),
            ));
        }
    }
    check_entries(&v, &config.data_sources)?;
    check_entries(&v, &config.data_sinks)?;
    check_entries(&v, &config.deadletter_sinks)?;
    check_entries(&v, &config.schema_sinks)?;

    let settings = v.settings(config, overrides)?;
    let default_frequency = v.sync_frequency_default()?;
    for (name, entry) in &config.data_sinks {
        if let Some(r) = &entry.schema_sink {
            v.resolve(
                &format!("data_sinks.{name}.schema_sink"),
                r,
                &config.schema_sinks,
            )?;
        }
    }
    for (name, entry) in &config.deadletter_sinks {
        if let Some(r) = &entry.schema_sink {
            v.resolve(
                &format!("deadletter_sinks.{name}.schema_sink"),
                r,
                &config.schema_sinks,
            )?;
        }
    }
    let sinks = v.destinations(&config.data_sinks, &settings.store)?;
    v.check_deadletter_sinks(&config.deadletter_sinks)?;

    let mut pipelines = BTreeMap::new();
    for (name, p) in &config.pipelines {
        let at = |key: &str| format!("pipelines.{name}.{key}");
        let source = v.resolve(&at("data_source"), &p.data_source, &config.data_sources)?;
        let sink = p
            .data_sink
            .as_deref()
            .map(|r| v.resolve(&at("data_sink"), r, &config.data_sinks))
            .transpose()?;
        let deadletter_sink = p
            .deadletter_sink
            .as_deref()
            .map(|r| v.resolve(&at("deadletter_sink"), r, &config.deadletter_sinks))
            .transpose()?;
        let mut schema_sink = p
            .schema_sink
            .as_deref()
            .map(|r| v.resolve(&at("schema_sink"), r, &config.schema_sinks))
            .transpose()?;
        if let Some(sink) = &sink
            && let Some(r) = config
                .data_sinks
                .get(&sink.name)
                .and_then(|e| e.schema_sink.as_deref())
        {
            schema_sink = Some(v.resolve(
                &format!("data_sinks.{}.schema_sink", sink.name),
                r,
                &config.schema_sinks,
            )?);
        }
        if let SourceConnector::File(f) = &source.connector
            && f.path.trim().is_empty()
        {
            return Err(v.bad_value(
                &format!("data_sources.{}.File.path", source.name),
                "must not be empty",
            ));
        }
        if let SourceConnector::S3(c) = &source.connector {
            let at = |key: &str| format!("data_sources.{}.S3.{key}", source.name);
            if c.s3_bucket.trim().is_empty() {
                return Err(v.bad_value(&at("s3_bucket"), "must not be empty"));
            }
            if c.s3_bucket.contains('/') || c.s3_bucket.contains(':') {
                return Err(v.bad_value(
                    &at("s3_bucket"),
                    "must be a bucket name, not a URI or path (put the key prefix in s3_prefix)",
                ));
            }
            if c.s3_prefix_ordered_depth
                .is_some_and(|d| d > MAX_S3_ORDERED_DEPTH)
            {
                return Err(v.bad_value(
                    &at("s3_prefix_ordered_depth"),
                    &format!("must be at most {MAX_S3_ORDERED_DEPTH}"),
                ));
            }
            if c.s3_delimiter
                .as_deref()
                .is_some_and(|d| d.is_empty() || d.len() > 32)
            {
                return Err(v.bad_value(&at("s3_delimiter"), "must be 1 to 32 bytes"));
            }
        }
        if let SourceConnector::HttpClient(c) = &source.connector {
            v.check_http(&source.name, c)?;
        }
        if let SourceConnector::Stdin(c) = &source.connector
            && matches!(
                c.format,
                Some(
                    super::connectors::InputFormat::Parquet
                        | super::connectors::InputFormat::JsonArray
                )
            )
        {
            return Err(v.bad_value(
                &format!("data_sources.{}.Stdin.format", source.name),
                "standard input is read line by line: use `jsonl` (or `json`, one object per line) or `csv`",
            ));
        }
        if let SourceConnector::Postgres(c) = &source.connector {
            v.check_postgres(&source.name, c)?;
        }
        let sizes = match &source.connector {
            SourceConnector::File(f) => Some((
                "File",
                f.batch_size.map(|n| n as u64),
                f.batch_size_bytes,
                f.batch_size_seconds,
            )),
            SourceConnector::S3(c) => Some((
                "S3",
                c.batch_size.map(|n| n as u64),
                c.batch_size_bytes,
                c.batch_size_seconds,
            )),
            SourceConnector::Stdin(c) => Some((
                "Stdin",
                c.batch_size.map(|n| n as u64),
                c.batch_size_bytes,
                c.batch_size_seconds,
            )),
            SourceConnector::HttpClient(c) => Some((
                "HttpClient",
                c.batch_size.map(|n| n as u64),
                c.batch_size_bytes,
                c.batch_size_seconds,
            )),
            _ => None,
        };
        if let Some((kind, rows, bytes, seconds)) = sizes {
            for (key, value) in [
                ("batch_size", rows),
                ("batch_size_bytes", bytes),
                ("batch_size_seconds", seconds),
            ] {
                if value == Some(0) {
                    return Err(v.bad_value(
                        &format!("data_sources.{}.{kind}.{key}", source.name),
                        "must be at least 1",
                    ));
                }
            }
        }
        // An HttpClient source's `scrape_interval_seconds` sets how often `sync` polls it
        // when the pipeline does not say.
        let scrape_interval = match &source.connector {
            SourceConnector::HttpClient(c) => c.scrape_interval_seconds,
            _ => None,
        };
        let frequency = match p.sync_frequency_seconds.or(scrape_interval) {
            Some(seconds) => seconds,
            None => default_frequency,
        };
        if frequency == 0 {
            return Err(v.bad_value(&at("sync_frequency_seconds"), "must be at least 1"));
        }
        for (key, value) in [
            ("buffer_threshold_bytes", p.buffer_threshold_bytes),
            ("buffer_threshold_seconds", p.buffer_threshold_seconds),
        ] {
            if value == Some(0) {
                return Err(v.bad_value(&at(key), "must be at least 1"));
            }
        }
        let cdc = v.cdc(&at("cdc"), name, p.cdc.as_ref(), &source)?;
        let data_dir = match &p.data_dir {
            Some(dir) => v.base_dir.join(dir),
            None => match v.env.var("DATA_DIR").filter(|d| !d.is_empty()) {
                Some(dir) => PathBuf::from(dir),
                None => v.base_dir.join("data"),
            },
        };
        let transform = v.transform(p.transform.as_ref(), &at("transform"))?;
        // A sink that is not a lake sink is not supported: `check_supported` below refuses it.
        let destination = sink.as_ref().and_then(|s| {
            sinks
                .get(&s.name)
                .map(|resolved| resolved.destination(&s.name, &transform))
        });
        let files = match &sink {
            Some(s) => v.file_destination(s, schema_sink.as_ref(), &transform, &settings.store)?,
            None => {
                if let Some(s) = &schema_sink
                    && !matches!(
                        s.connector,
                        SchemaSinkConnector::File(_) | SchemaSinkConnector::S3(_)
                    )
                {
                    return Err(v.bad_value(
                        &at("schema_sink"),
                        &format!(
                            "`schema_sinks.{}` is a `{}` schema sink, which describes the tables of a data sink, and the pipeline has no `data_sink`",
                            s.name,
                            s.connector.type_name()
                        ),
                    ));
                }
                None
            }
        };
        if !transform.partition_allowed_values.is_empty() {
            let keeps_column = matches!(
                files.as_ref().map(|f| &f.kind),
                Some(FileDestinationKind::File { .. } | FileDestinationKind::S3 { .. })
            );
            if !keeps_column {
                let sink = match &sink {
                    Some(s) => format!(
                        "the `{}` destination `data_sinks.{}`",
                        s.connector.type_name(),
                        s.name
                    ),
                    None => "a pipeline without a data_sink".to_owned(),
                };
                return Err(v.bad_value(
                    &at("transform.partition_allowed_values"),
                    &format!(
                        "is for the File and S3 destinations, whose files keep the partition column; {sink} holds a partition's value only in the partition, so `_other` would replace it"
                    ),
                ));
            }
        }
        let postgres = sink.as_ref().and_then(|s| match &s.connector {
            SinkConnector::Postgres(c) => Some(Named {
                name: s.name.clone(),
                connector: c.clone(),
            }),
            _ => None,
        });
        let partitioned =
            !transform.batch_partition_fields.is_empty() || !transform.batch_time_fields.is_empty();
        let mut write = v.write_policies(&at, p, sink.as_ref(), partitioned)?;
        if cdc.is_some() && write.replaces_reads() {
            return Err(v.bad_value(
                &at("write_policy"),
                "`replace_table` and `replace_partition` replace tables by whole reads, and a change stream (cdc) is no whole read: its passes carry changes, not the table; use `merge_by_key` (or `append` to keep the change log)",
            ));
        }
        write.source_keys = p.write_policy.is_none()
            && p.primary_key.is_none()
            && cdc.is_some()
            && (postgres.is_some() || destination.is_some());
        let wal = placement::wal_location(&settings, name, state_dir(&data_dir, &settings, name))
            .ok_or_else(|| v.no_wal_bucket(overrides.wal_storage.as_deref()))?;
        let wal_compression = settings.wal_compression.unwrap_or_else(|| {
            crate::wal::WalCompression::default_for(
                matches!(wal, WalLocation::Disk { .. }),
                sink.is_some(),
            )
        });
        let aws = placement::aws_settings(
            &settings,
            &source,
            destination.as_ref(),
            files.as_ref(),
            deadletter_sink.as_ref(),
        );
        pipelines.insert(
            name.clone(),
            ValidatedPipeline {
                name: name.clone(),
                source,
                destination,
                files,
                postgres,
                write,
                deadletter_sink,
                schema_sink,
                sync_frequency: Duration::from_secs(frequency),
                chaos_mode: p.chaos_mode.unwrap_or(settings.chaos_mode),
                buffer_threshold_bytes: p
                    .buffer_threshold_bytes
                    .unwrap_or(settings.buffer_threshold_bytes),
                buffer_threshold_seconds: p
                    .buffer_threshold_seconds
                    .map_or(settings.buffer_threshold_seconds, Duration::from_secs),
                wal_compression,
                cdc,
                data_dir,
                transform,
                wal,
                store: placement::pipeline_store(&settings, name),
                aws,
            },
        );
    }

    // Last, so that every mistake in the file is reported before "not supported yet".
    check_supported(&config.data_sources)?;
    check_supported(&config.data_sinks)?;
    check_supported(&config.deadletter_sinks)?;
    check_supported(&config.schema_sinks)?;

    Ok(ValidatedConfig {
        file: loaded.display_name(),
        base_dir: loaded.base_dir.clone(),
        settings,
        pipelines,
    })
}

fn check_entries<C: ConnectorSet>(
    v: &Validator<'_>,
    entries: &BTreeMap<String, Entry<C>>,
) -> Result<(), ConfigError> {
    entries
        .keys()
        .try_for_each(|name| v.check_name(C::SECTION, name))
}

fn check_supported<C: ConnectorSet>(
    entries: &BTreeMap<String, Entry<C>>,
) -> Result<(), ConfigError> {
    for (name, entry) in entries {
        if !entry.connector.is_supported() {
            return Err(ConfigError::Unsupported {
                connector: entry.connector.type_name(),
                section: C::SECTION,
                name: name.clone(),
            });
        }
    }
    Ok(())
}

struct Validator<'a> {
    file: &'a Path,
    env: &'a (dyn Environment + Send + Sync),
    base_dir: &'a Path,
}

impl Validator<'_> {
    fn bad_name(&self, section: &'static str, name: &str, reason: String) -> ConfigError {
        ConfigError::BadName {
            file: self.file.to_path_buf(),
            section,
            name: name.to_owned(),
            reason,
        }
    }

    fn bad_value(&self, path: &str, message: &str) -> ConfigError {
        ConfigError::BadValue {
            file: self.file.to_path_buf(),
            path: path.to_owned(),
            message: message.to_owned(),
        }
    }

    /// Names become directory, table and key names: letters, digits, `_` and `-`; no dots;
    /// at most [`crate::schema::naming::MAX_TABLE_NAME_BYTES`] bytes (a pipeline's name is
    /// its default table).
    fn check_name(&self, section: &'static str, name: &str) -> Result<(), ConfigError> {
        if name.is_empty() {
            return Err(self.bad_name(section, name, "is empty".to_owned()));
        }
        let max = crate::schema::naming::MAX_TABLE_NAME_BYTES;
        if name.len() > max {
            return Err(self.bad_name(
                section,
                name,
                format!("is {} bytes long; names are at most {max}", name.len()),
            ));
        }
        if name.contains('.') {
            return Err(self.bad_name(
                section,
                name,
                "contains a dot; names may not contain dots because references are written `<section>.<name>`".to_owned(),
            ));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        {
            return Err(self.bad_name(
                section,
                name,
                format!("contains {c:?}; use letters, digits, `_` and `-`"),
            ));
        }
        Ok(())
    }

    fn resolve<C: ConnectorSet + Clone>(
        &self,
        from: &str,
        reference: &str,
        entries: &BTreeMap<String, Entry<C>>,
    ) -> Result<Named<C>, ConfigError> {
        let bad = || ConfigError::BadReference {
            file: self.file.to_path_buf(),
            from: from.to_owned(),
            reference: reference.to_owned(),
            expected: C::SECTION,
        };
        let (section, name) = reference.split_once('.').ok_or_else(bad)?;
        if section != C::SECTION || name.is_empty() {
            return Err(bad());
        }
        match entries.get(name) {
            Some(entry) => Ok(Named {
                name: name.to_owned(),
                connector: entry.connector.clone(),
            }),
            None => Err(ConfigError::DanglingReference {
                file: self.file.to_path_buf(),
                from: from.to_owned(),
                reference: reference.to_owned(),
                name: name.to_owned(),
                suggestion: suggest(name, entries.keys().map(String::as_str))
                    .map(|s| format!("{section}.{s}")),
            }),
        }
    }

    fn var(&self, name: &str) -> Option<String> {
        self.env.var(name).filter(|v| !v.is_empty())
    }

    /// An `S3` deadletter sink names a bucket and, optionally, a key prefix (not a URI).
    fn check_deadletter_sinks(
        &self,
        sinks: &BTreeMap<String, Entry<DeadletterConnector>>,
    ) -> Result<(), ConfigError> {
        for (name, entry) in sinks {
            let format = match &entry.connector {
                DeadletterConnector::File(c) => c.format,
                DeadletterConnector::S3(c) => c.format,
                _ => None,
            };
            if format == Some(super::connectors::OutputFormat::Csv) {
                return Err(self.bad_value(
                    &format!(
                        "deadletter_sinks.{name}.{}.format",
                        entry.connector.type_name()
                    ),
                    "must be `jsonl` or `parquet` (`deadletters replay` reads those back)",
                ));
            }
            if let DeadletterConnector::Athena(c) = &entry.connector {
                let at = |key: &str| format!("deadletter_sinks.{name}.Athena.{key}");
                self.check_bucket(&at("s3_bucket"), &c.s3_bucket)?;
                match &c.glue_database_name {
                    None => return Err(self.bad_value(&at("glue_database_name"), "is required")),
                    Some(db) => self.check_glue_database(&at("glue_database_name"), db)?,
                }
                if c.format
                    .is_some_and(|f| f != super::connectors::OutputFormat::Parquet)
                {
                    return Err(self.bad_value(&at("format"), "must be `parquet`"));
                }
            }
            if let DeadletterConnector::S3(c) = &entry.connector {
                let at = |key: &str| format!("deadletter_sinks.{name}.S3.{key}");
                self.check_bucket(&at("s3_bucket"), &c.s3_bucket)?;
                if let Some(prefix) = &c.s3_prefix
                    && (prefix.contains("://") || prefix.split('/').any(|p| p == ".." || p == "."))
                {
                    return Err(self.bad_value(
                        &at("s3_prefix"),
                        &format!("'{prefix}' must be a key prefix such as `rejects/` (not a URI, no `.` or `..` parts)"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_bucket(&self, key: &str, bucket: &str) -> Result<(), ConfigError> {
        if bucket.contains("://") || bucket.contains('/') {
            return Err(self.bad_value(
                key,
                &format!("'{bucket}' must be a bucket name, not a URI or path"),
            ));
        }
        Ok(())
    }
}
