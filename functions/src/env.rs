//! What a function reads from its environment: where the config is (`SKIPPR_CONFIG_S3_URI`,
//! else the package in `LAMBDA_TASK_ROOT`), `DATA_DIR`'s default (every pipeline's local
//! state goes there, whatever its `data_dir` says), the deadline margin, and the refusal of a
//! WAL or a state store on the function's disk.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use skipprd::aws::Aws;
use skipprd::config::env::Environment;
use skipprd::config::load::{CONFIG_S3_URI_VAR, ConfigSource, load, load_s3, parse_s3_uri};
use skipprd::config::validate::{StoreKind, ValidatedConfig, WalStorage};
use skipprd::config::{ConfigError, ProcessEnv};

use crate::error::ServerlessError;

/// `DATA_DIR` when it is unset: the function's scratch space (WAL and store never live there).
pub const DEFAULT_DATA_DIR: &str = "/tmp/skipprd";

/// The variable overriding the deadline margin, in seconds.
pub const DEADLINE_MARGIN_VAR: &str = "SKIPPR_DEADLINE_MARGIN_SECONDS";

/// The default margin's share of the time left at the start of an invocation.
pub const DEFAULT_MARGIN_SHARE: f64 = 0.3;

/// The default margin's cap.
pub const DEFAULT_MARGIN_CAP: Duration = Duration::from_secs(60);

/// The process environment with the function's defaults (`DATA_DIR`).
#[derive(Debug, Clone)]
pub struct FunctionEnv<E> {
    base: E,
}

impl<E: Environment> FunctionEnv<E> {
    /// `base` with the function's defaults under it.
    pub fn new(base: E) -> Self {
        FunctionEnv { base }
    }
}

impl<E: Environment> Environment for FunctionEnv<E> {
    fn var(&self, name: &str) -> Option<String> {
        match self.base.var(name) {
            Some(v) if !v.is_empty() => Some(v),
            other if name == "DATA_DIR" => other
                .filter(|v| !v.is_empty())
                .or_else(|| Some(DEFAULT_DATA_DIR.to_owned())),
            other => other,
        }
    }
}

/// Where the config comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigLocation {
    /// An object in S3.
    S3 {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
    },
    /// A file (`SKIPPR_CONFIG_FILE`, or found in the task root).
    Packaged {
        /// The directory the function's code and files are in (`LAMBDA_TASK_ROOT`).
        task_root: PathBuf,
    },
}

/// Where the config is, from the environment: `SKIPPR_CONFIG_S3_URI`, else the package.
pub fn config_location(env: &dyn Environment) -> Result<ConfigLocation, ServerlessError> {
    if let Some(uri) = env.var(CONFIG_S3_URI_VAR).filter(|v| !v.is_empty()) {
        let (bucket, key) = parse_s3_uri(&uri)?;
        return Ok(ConfigLocation::S3 { bucket, key });
    }
    Ok(ConfigLocation::Packaged {
        task_root: task_root(env),
    })
}

/// `LAMBDA_TASK_ROOT`, else the current directory.
fn task_root(env: &dyn Environment) -> PathBuf {
    env.var("LAMBDA_TASK_ROOT")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
}

/// Load the config from `location` with `env` under the function's defaults, and validate
/// it (`WAL_STORAGE` from the environment). A package without a config file is an error.
pub fn load_config<E: Environment + Clone + Send + Sync + 'static>(
    location: &ConfigLocation,
    env: E,
    aws: &Aws,
) -> Result<ValidatedConfig, ServerlessError> {
    let env = FunctionEnv::new(env);
    let loaded = match location {
        ConfigLocation::Packaged { task_root } => {
            let loaded = load(None, task_root, env.clone())?;
            if loaded.source == ConfigSource::NotFound {
                return Err(ConfigError::NoPipelines {
                    file: loaded.display_name(),
                }
                .into());
            }
            loaded
        }
        ConfigLocation::S3 { bucket, key } => {
            let base_dir = task_root(&env);
            load_s3(&format!("s3://{bucket}/{key}"), aws, &base_dir, env.clone())?
        }
    };
    let mut config = skipprd::config::validate(&loaded, None)?;
    keep_state_in_scratch(&mut config, &env);
    Ok(config)
}

/// Point every pipeline's `data_dir` at the function's scratch space (`DATA_DIR`, else
/// [`DEFAULT_DATA_DIR`]), whatever the config says: a function creates nothing outside it
/// (the task root is read-only on AWS). A pipeline's own `data_dir` (`./data`, the usual local
/// setting) is resolved against the task root, so it is overridden, with a log line. The WAL
/// and the store are remote ([`check_remote_state`]); what a pass still keeps locally (the
/// state directory, a `local` schema) goes to the scratch space.
pub fn keep_state_in_scratch(config: &mut ValidatedConfig, env: &dyn Environment) {
    let scratch = PathBuf::from(
        env.var("DATA_DIR")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| DEFAULT_DATA_DIR.to_owned()),
    );
    for pipeline in config.pipelines.values_mut() {
        if pipeline.data_dir != scratch {
            tracing::info!(
                pipeline = %pipeline.name,
                configured = %pipeline.data_dir.display(),
                used = %scratch.display(),
                "A function keeps local state in its scratch space (DATA_DIR), not in the configured data_dir."
            );
            pipeline.data_dir = scratch.clone();
        }
    }
}

/// [`load_config`] from the process environment: what a function's init does.
pub fn load_config_from_process(aws: &Aws) -> Result<ValidatedConfig, ServerlessError> {
    let location = config_location(&ProcessEnv)?;
    load_config(&location, ProcessEnv, aws)
}

/// Refuse a config whose WAL or state store would live on the function's disk.
pub fn check_remote_state(config: &ValidatedConfig) -> Result<(), ServerlessError> {
    let settings = &config.settings;
    if settings.wal_storage != WalStorage::S3 {
        return Err(ServerlessError::LocalState {
            setting: "WAL_STORAGE",
            value: "disk".to_owned(),
            what: "the write-ahead log",
            fix: "set WAL_STORAGE=s3 and SKIPPR_WAL_S3_BUCKET on the function",
        });
    }
    if settings.reset_offsets {
        // A one-off for the CLI: on a function it would start the pipeline over on every
        // scheduled invocation.
        return Err(ServerlessError::Config(Box::new(
            skipprd::config::ConfigError::UnsupportedSetting {
                setting: "RESET_OFFSETS".to_owned(),
                value: "true".to_owned(),
                note: Some(
                    "on a function it would reset the pipeline at every invocation; run `skipprd reset -p <pipeline> --yes` against the deployment's config once instead"
                        .to_owned(),
                ),
            },
        )));
    }
    if settings.reset_metadata {
        // Like RESET_OFFSETS: a one-off, which on a function would re-read the whole source
        // at every scheduled invocation.
        return Err(ServerlessError::Config(Box::new(
            skipprd::config::ConfigError::UnsupportedSetting {
                setting: "RESET_METADATA".to_owned(),
                value: "true".to_owned(),
                note: Some(
                    "on a function it would re-discover the source at every invocation; run `skipprd discover -p <pipeline>` against the deployment's config once instead"
                        .to_owned(),
                ),
            },
        )));
    }
    if settings.store == StoreKind::Embedded {
        return Err(ServerlessError::LocalState {
            setting: "skippr.store.type",
            value: "sled".to_owned(),
            what: "the state store and the writer lease",
            fix: "set `skippr.store: {type: dynamodb, name: <table>}` in the config",
        });
    }
    Ok(())
}

/// The deadline margin (see the crate docs): `SKIPPR_DEADLINE_MARGIN_SECONDS` when set, else
/// 30 % of `remaining` capped at 60 s.
pub fn deadline_margin(
    env: &dyn Environment,
    remaining: Duration,
) -> Result<Duration, ServerlessError> {
    match env
        .var(DEADLINE_MARGIN_VAR)
        .filter(|v| !v.trim().is_empty())
    {
        Some(value) => value
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or(ServerlessError::Margin { value }),
        None => Ok(remaining
            .mul_f64(DEFAULT_MARGIN_SHARE)
            .min(DEFAULT_MARGIN_CAP)),
    }
}

/// Time left until `deadline_ms` (milliseconds since the epoch, Lambda's `Deadline-Ms`);
/// zero when it has passed.
pub fn remaining_until(deadline_ms: u64) -> Duration {
    let deadline = UNIX_EPOCH + Duration::from_millis(deadline_ms);
    deadline
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> BTreeMap<String, String> {
        vars.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_margin_is_30_percent_capped_at_60_s_or_the_variable() {
        let none = env(&[]);
        assert_eq!(
            deadline_margin(&none, Duration::from_secs(10)).unwrap(),
            Duration::from_secs(3)
        );
        assert_eq!(
            deadline_margin(&none, Duration::from_secs(900)).unwrap(),
            Duration::from_secs(60)
        );
        let set = env(&[(DEADLINE_MARGIN_VAR, "2.5")]);
        assert_eq!(
            deadline_margin(&set, Duration::from_secs(900)).unwrap(),
            Duration::from_millis(2500)
        );
        for bad in ["-1", "soon", "NaN"] {
            let e =
                deadline_margin(&env(&[(DEADLINE_MARGIN_VAR, bad)]), Duration::ZERO).unwrap_err();
            assert_eq!(e.error_type(), "NonRetryable.Config", "{bad}");
        }
    }

    #[test]
    fn the_config_is_in_s3_when_the_variable_is_set_else_in_the_package() {
        let location = config_location(&env(&[(CONFIG_S3_URI_VAR, "s3://b/k.yml")])).unwrap();
        assert_eq!(
            location,
            ConfigLocation::S3 {
                bucket: "b".into(),
                key: "k.yml".into()
            }
        );
        let packaged = config_location(&env(&[("LAMBDA_TASK_ROOT", "/var/task")])).unwrap();
        assert_eq!(
            packaged,
            ConfigLocation::Packaged {
                task_root: PathBuf::from("/var/task")
            }
        );
    }

    #[test]
    fn data_dir_defaults_to_tmp_and_other_variables_pass_through() {
        let e = FunctionEnv::new(env(&[("WAL_STORAGE", "s3"), ("DATA_DIR", "")]));
        assert_eq!(e.var("DATA_DIR").as_deref(), Some(DEFAULT_DATA_DIR));
        assert_eq!(e.var("WAL_STORAGE").as_deref(), Some("s3"));
        assert_eq!(e.var("UNSET"), None);
        let set = FunctionEnv::new(env(&[("DATA_DIR", "/mnt/efs")]));
        assert_eq!(set.var("DATA_DIR").as_deref(), Some("/mnt/efs"));
    }

    fn validated(yaml: &str, vars: &[(&str, &str)]) -> ValidatedConfig {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("skippr.yml"), yaml).unwrap();
        let loaded = load(None, dir.path(), FunctionEnv::new(env(vars))).unwrap();
        skipprd::config::validate(&loaded, None).unwrap()
    }

    const PIPELINE: &str = "pipelines:\n  p:\n    data_source: data_sources.s\ndata_sources:\n  s:\n    File:\n      path: input\n";

    #[test]
    fn a_pipelines_own_data_dir_is_replaced_by_the_scratch_space() {
        let yaml = PIPELINE.replace(
            "    data_source: data_sources.s\n",
            "    data_source: data_sources.s\n    data_dir: ./data\n",
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("skippr.yml"), yaml).unwrap();
        let vars = env(&[("DATA_DIR", "/mnt/scratch")]);
        let loaded = load(None, dir.path(), FunctionEnv::new(vars.clone())).unwrap();
        let mut config = skipprd::config::validate(&loaded, None).unwrap();
        assert_eq!(config.pipelines["p"].data_dir, dir.path().join("./data"));
        keep_state_in_scratch(&mut config, &FunctionEnv::new(vars));
        assert_eq!(
            config.pipelines["p"].data_dir,
            PathBuf::from("/mnt/scratch")
        );
        keep_state_in_scratch(&mut config, &FunctionEnv::new(env(&[])));
        assert_eq!(
            config.pipelines["p"].data_dir,
            PathBuf::from(DEFAULT_DATA_DIR)
        );
    }

    #[test]
    fn a_wal_or_store_on_the_functions_disk_is_refused() {
        let dynamodb = format!("skippr:\n  store:\n    type: dynamodb\n    name: t\n{PIPELINE}");
        let remote = validated(
            &dynamodb,
            &[("WAL_STORAGE", "s3"), ("SKIPPR_WAL_S3_BUCKET", "w")],
        );
        check_remote_state(&remote).unwrap();
        assert_eq!(
            remote.pipelines["p"].data_dir,
            PathBuf::from(DEFAULT_DATA_DIR)
        );

        let disk_wal = validated(&dynamodb, &[]);
        let e = check_remote_state(&disk_wal).unwrap_err();
        assert_eq!(e.error_type(), "NonRetryable.LocalState");
        assert!(e.to_string().contains("WAL_STORAGE"), "{e}");

        let embedded = validated(
            PIPELINE,
            &[("WAL_STORAGE", "s3"), ("SKIPPR_WAL_S3_BUCKET", "w")],
        );
        let e = check_remote_state(&embedded).unwrap_err();
        assert_eq!(e.error_type(), "NonRetryable.LocalState");
        assert!(e.to_string().contains("skippr.store.type"), "{e}");
    }
}
