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
mod http;
mod placement;
mod postgres;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use destination::{
    DEFAULT_TABLE_NAMESPACE, Destination, DestinationKind, LakeCatalog, LakeLocation, Layout,
    Maintenance,
};
pub use placement::{AwsSettings, PipelineStore, WalLocation};

use super::connectors::{
    ConnectorSet, DeadletterConnector, Entry, SchemaSinkConnector, SourceConnector,
};
use super::env::Environment;
use super::error::{ConfigError, suggest};
use super::load::LoadedConfig;
use super::{FieldList, StorageMode, StoreType, TimeUnit, TransformConfig};

/// Pipeline names that are reserved for skipprd's own use.
pub const RESERVED_PIPELINE_NAMES: &[&str] =
    &["deadletters", "wal", "_skippr", "skippr", "metadata"];

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
    /// Its deadletter sink, if any.
    pub deadletter_sink: Option<Named<DeadletterConnector>>,
    /// Its schema sink, if any (from the sink entry, else the pipeline).
    pub schema_sink: Option<Named<SchemaSinkConnector>>,
    /// Time between the starts of two passes.
    pub sync_frequency: Duration,
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

    let settings = v.settings(config, wal_storage)?;
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
            if c.batch_size == Some(0) {
                return Err(v.bad_value(&at("batch_size"), "must be at least 1"));
            }
        }
        if let SourceConnector::HttpClient(c) = &source.connector {
            v.check_http(&source.name, c)?;
        }
        if let SourceConnector::Postgres(c) = &source.connector {
            v.check_postgres(&source.name, c)?;
        }
        if let SourceConnector::File(f) = &source.connector
            && f.batch_size == Some(0)
        {
            return Err(v.bad_value(
                &format!("data_sources.{}.File.batch_size", source.name),
                "must be at least 1",
            ));
        }
        // An HttpClient source's `scrape_interval_seconds` sets how often `sync` polls it
        // when the pipeline does not say.
        let scrape_interval = match &source.connector {
            SourceConnector::HttpClient(c) => c.scrape_interval_seconds,
            _ => None,
        };
        let frequency = p
            .sync_frequency_seconds
            .or(scrape_interval)
            .unwrap_or(DEFAULT_SYNC_FREQUENCY_SECONDS);
        if frequency == 0 {
            return Err(v.bad_value(&at("sync_frequency_seconds"), "must be at least 1"));
        }
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
        let wal = placement::wal_location(&settings, name, state_dir(&data_dir, &settings, name))
            .ok_or_else(|| v.no_wal_bucket(wal_storage))?;
        let aws = placement::aws_settings(
            &settings,
            &source,
            destination.as_ref(),
            deadletter_sink.as_ref(),
        );
        pipelines.insert(
            name.clone(),
            ValidatedPipeline {
                name: name.clone(),
                source,
                destination,
                deadletter_sink,
                schema_sink,
                sync_frequency: Duration::from_secs(frequency),
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

    /// A setting from the file (`key`), else from environment variable `var`, with its origin.
    fn setting(
        &self,
        from_file: Option<&String>,
        key: &str,
        var: &str,
    ) -> Option<(String, Origin)> {
        match from_file {
            Some(v) => Some((v.clone(), Origin::Key(key.to_owned()))),
            None => self.var(var).map(|v| (v, Origin::Var(var.to_owned()))),
        }
    }

    /// An error about `value`, reported where it came from: a key of the file, or a variable
    /// or flag.
    fn invalid(&self, origin: &Origin, value: &str, message: &str) -> ConfigError {
        match origin {
            Origin::Key(key) => self.bad_value(key, &format!("'{value}' {message}")),
            Origin::Var(name) => ConfigError::BadSetting {
                name: name.clone(),
                value: value.to_owned(),
                message: message.to_owned(),
            },
        }
    }

    fn settings(
        &self,
        config: &super::Config,
        wal_flag: Option<&str>,
    ) -> Result<Settings, ConfigError> {
        let s = &config.skippr;
        let identity =
            |value: Option<&String>, key: &str, var: &str| -> Result<String, ConfigError> {
                match self.setting(value, key, var) {
                    None => Ok("default".to_owned()),
                    Some((v, origin)) => {
                        if v.is_empty()
                            || !v
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                        {
                            return Err(self.invalid(
                                &origin,
                                &v,
                                "may only contain letters, digits, `_` and `-`",
                            ));
                        }
                        Ok(v)
                    }
                }
            };
        let tenant = identity(s.tenant.as_ref(), "skippr.tenant", "TENANT")?;
        let workspace = identity(s.workspace.as_ref(), "skippr.workspace", "WORKSPACE_NAME")?;
        let bucket =
            |value: Option<&String>, key: &str, var: &str| -> Result<Option<String>, ConfigError> {
                match self.setting(value, key, var) {
                    None => Ok(None),
                    Some((b, origin)) => {
                        if b.contains("://") || b.contains('/') {
                            return Err(self.invalid(
                                &origin,
                                &b,
                                "must be a bucket name, not a URI or path",
                            ));
                        }
                        Ok(Some(b))
                    }
                }
            };
        let skippr_s3_bucket = bucket(
            s.skippr_s3_bucket.as_ref(),
            "skippr.skippr_s3_bucket",
            "SKIPPR_S3_BUCKET",
        )?;
        let wal_s3_bucket = bucket(
            s.wal_s3_bucket.as_ref(),
            "skippr.wal_s3_bucket",
            "SKIPPR_WAL_S3_BUCKET",
        )?;
        let storage_mode = match s.skipprd_el_storage_mode {
            Some(mode) => mode,
            None => match self.var("SKIPPRD_EL_STORAGE_MODE") {
                Some(v) => match v.to_ascii_lowercase().as_str() {
                    "local" => StorageMode::Local,
                    "s3" => StorageMode::S3,
                    _ => {
                        return Err(self.invalid(
                            &Origin::Var("SKIPPRD_EL_STORAGE_MODE".to_owned()),
                            &v,
                            "is not a storage mode; use `local` or `s3`",
                        ));
                    }
                },
                None if skippr_s3_bucket.is_some() => StorageMode::S3,
                None => StorageMode::Local,
            },
        };
        if storage_mode == StorageMode::S3 && skippr_s3_bucket.is_none() {
            return Err(self.bad_value(
                "skippr.skipprd_el_storage_mode",
                "is `s3`, but no skippr bucket is set (skippr.skippr_s3_bucket or SKIPPR_S3_BUCKET)",
            ));
        }
        let store = match &s.store {
            None => StoreKind::Embedded,
            Some(store) => match store.store_type {
                StoreType::Sled => StoreKind::Embedded,
                StoreType::Dynamodb => StoreKind::Dynamodb {
                    table: store.name.clone().ok_or_else(|| {
                        self.bad_value(
                            "skippr.store.name",
                            "is required when skippr.store.type is `dynamodb`",
                        )
                    })?,
                },
                StoreType::CloudTables => {
                    return Err(ConfigError::UnsupportedSetting {
                        setting: "skippr.store.type".to_owned(),
                        value: "cloud-tables".to_owned(),
                        note: Some("use `sled` (embedded, the default) or `dynamodb`".to_owned()),
                    });
                }
            },
        };
        let chaos_mode = s.chaos_mode.unwrap_or_else(|| {
            matches!(
                self.var("SKIPPR_CHAOS_MODE")
                    .as_deref()
                    .map(str::to_ascii_lowercase)
                    .as_deref(),
                Some("yes" | "true" | "1")
            )
        });
        let wal = match wal_flag {
            Some(v) => Some((v.to_owned(), "--wal-storage")),
            None => self.var("WAL_STORAGE").map(|v| (v, "WAL_STORAGE")),
        };
        let wal_storage = match &wal {
            None => WalStorage::Disk,
            Some((v, name)) => match v.to_ascii_lowercase().as_str() {
                "disk" => WalStorage::Disk,
                "s3" => WalStorage::S3,
                "clustered" => {
                    return Err(ConfigError::UnsupportedSetting {
                        setting: (*name).to_owned(),
                        value: v.clone(),
                        note: Some("use `disk` (default) or `s3`".to_owned()),
                    });
                }
                _ => {
                    return Err(self.invalid(
                        &Origin::Var((*name).to_owned()),
                        v,
                        "is not a WAL storage; use `disk` (default) or `s3`",
                    ));
                }
            },
        };
        if wal_storage == WalStorage::S3 && wal_s3_bucket.is_none() && skippr_s3_bucket.is_none() {
            return Err(self.no_wal_bucket(wal_flag));
        }
        let buffer_threshold_bytes =
            self.positive_bytes("BUFFER_THRESHOLD_BYTES", DEFAULT_BUFFER_THRESHOLD_BYTES)?;
        let deliver_threshold_bytes =
            self.positive_bytes("DELIVER_THRESHOLD_BYTES", DEFAULT_DELIVER_THRESHOLD_BYTES)?;
        let lease_ttl = match self.var("SKIPPR_LEASE_TTL_SECONDS") {
            None => crate::state::DEFAULT_LEASE_TTL,
            Some(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .map(std::time::Duration::from_secs)
                .ok_or_else(|| {
                    self.invalid(
                        &Origin::Var("SKIPPR_LEASE_TTL_SECONDS".to_owned()),
                        &v,
                        "is not a positive whole number of seconds",
                    )
                })?,
        };
        Ok(Settings {
            tenant,
            workspace,
            storage_mode,
            skippr_s3_bucket,
            wal_s3_bucket,
            store,
            chaos_mode,
            wal_storage,
            buffer_threshold_bytes,
            deliver_threshold_bytes,
            lease_ttl,
        })
    }

    /// `WAL_STORAGE=s3` (or `--wal-storage s3`, when `wal_flag` is given) without a bucket.
    fn no_wal_bucket(&self, wal_flag: Option<&str>) -> ConfigError {
        let origin = match wal_flag {
            Some(_) => "--wal-storage",
            None => "WAL_STORAGE",
        };
        self.bad_value(
            "skippr.wal_s3_bucket",
            &format!(
                "is required when {origin} is `s3`: set skippr.wal_s3_bucket (SKIPPR_WAL_S3_BUCKET), or skippr.skippr_s3_bucket (SKIPPR_S3_BUCKET) for both"
            ),
        )
    }

    /// A byte count from the environment variable `var`, or `default` when it is unset.
    fn positive_bytes(&self, var: &str, default: u64) -> Result<u64, ConfigError> {
        match self.var(var) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    self.invalid(
                        &Origin::Var(var.to_owned()),
                        &v,
                        "is not a positive number of bytes",
                    )
                }),
        }
    }

    /// An `S3` deadletter sink names a bucket and, optionally, a key prefix (not a URI).
    fn check_deadletter_sinks(
        &self,
        sinks: &BTreeMap<String, Entry<DeadletterConnector>>,
    ) -> Result<(), ConfigError> {
        for (name, entry) in sinks {
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

    fn transform(&self, t: Option<&TransformConfig>, at: &str) -> Result<Transform, ConfigError> {
        let empty = TransformConfig::default();
        let t = t.unwrap_or(&empty);
        let list = |value: &Option<FieldList>, var: &str| -> Vec<String> {
            match value {
                Some(list) => list.0.clone(),
                None => self
                    .var(var)
                    .map(|v| FieldList::parse(&v).0)
                    .unwrap_or_default(),
            }
        };
        let flatten_events = match t.flatten_events {
            Some(b) => b,
            None => match self
                .var("TRANSFORM_FLATTEN_EVENTS")
                .map(|v| v.to_ascii_lowercase())
                .as_deref()
            {
                None | Some("false" | "0" | "no") => false,
                Some("true" | "1" | "yes") => true,
                Some(other) => {
                    return Err(self.invalid(
                        &Origin::Var("TRANSFORM_FLATTEN_EVENTS".to_owned()),
                        other,
                        "is not `true` or `false`",
                    ));
                }
            },
        };
        let batch_time_unit = match t.batch_time_unit {
            Some(u) => Some(u),
            None => match self.var("TRANSFORM_BATCH_TIME_UNIT") {
                None => None,
                Some(v) => Some(
                    serde_json::from_value::<TimeUnit>(serde_json::Value::String(
                        v.to_ascii_lowercase(),
                    ))
                    .map_err(|_| {
                        self.invalid(
                            &Origin::Var("TRANSFORM_BATCH_TIME_UNIT".to_owned()),
                            &v,
                            "is not one of year, month, day, hour, minute",
                        )
                    })?,
                ),
            },
        };
        let transform = Transform {
            namespace_fields: list(&t.namespace_fields, "TRANSFORM_NAMESPACE_FIELDS"),
            flatten_events,
            batch_partition_fields: list(
                &t.batch_partition_fields,
                "TRANSFORM_BATCH_PARTITION_FIELDS",
            ),
            batch_time_fields: list(&t.batch_time_fields, "TRANSFORM_BATCH_TIME_FIELDS"),
            batch_time_unit,
            batch_order_fields: list(&t.batch_order_fields, "TRANSFORM_BATCH_ORDER_FIELDS"),
        };
        if !transform.batch_time_fields.is_empty() && transform.batch_time_unit.is_none() {
            return Err(self.bad_value(
                &format!("{at}.batch_time_unit"),
                "is required when batch_time_fields is set",
            ));
        }
        for field in transform
            .namespace_fields
            .iter()
            .chain(&transform.batch_partition_fields)
        {
            if field.split('.').any(str::is_empty) {
                return Err(self.bad_value(at, &format!("'{field}' is not a valid dot path")));
            }
        }
        Ok(transform)
    }
}
