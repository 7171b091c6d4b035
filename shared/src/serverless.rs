//! What the Lambda functions (`functions/`) do, kept here so the CLI can reuse it and the
//! handlers stay thin: reading the invocation event, loading the config once per init,
//! refusing state that would live on the function's disk, one deadline-bounded `sync` pass,
//! `discover`, and how each error is classified.
//!
//! ## Event
//! Either a direct invoke `{"pipeline": "<name>"}`, an EventBridge rule's constant input (the
//! same body), or an EventBridge scheduled event whose `detail` is `{"pipeline": "<name>"}`.
//! Without a pipeline name the config's only pipeline is used (as the CLI does); with several
//! pipelines that is a non-retryable event error.
//!
//! ## Config
//! Loaded and validated once, at init: from `SKIPPR_CONFIG_S3_URI` (`s3://bucket/key`, fetched
//! with the S3 client; relative paths resolve against `LAMBDA_TASK_ROOT`) when set, else
//! `SKIPPR_CONFIG_FILE`, else the first config file name (`skippr.yml`, ...) in
//! `LAMBDA_TASK_ROOT` (a function with no config file fails). `DATA_DIR` defaults to
//! [`DEFAULT_DATA_DIR`] (`/tmp` is the only writable place of a function).
//!
//! The WAL and the state store must outlive the execution environment: a config whose WAL is on
//! disk (`WAL_STORAGE` other than `s3`) or whose store is the embedded one is refused,
//! non-retryably ([`check_remote_state`]). The saved schema goes to the skippr bucket when one
//! is configured (`skipprd_el_storage_mode: s3`, its default then), where `discover` writes it
//! and the CLI reads it; with `local` it lives under `DATA_DIR`, and a cold start re-infers it
//! from the data it reads.
//!
//! ## Deadline
//! A pass stops reading new batches when the invocation's deadline is nearer than a margin:
//! `SKIPPR_DEADLINE_MARGIN_SECONDS` (decimal seconds), default 30 % of the time left when the
//! invocation starts, capped at 60 s ([`deadline_margin`]). The batch being committed is
//! finished and what was committed is delivered before the function returns, so the margin
//! must cover one batch plus a delivery.
//!
//! ## Outcomes and errors
//! - success: a [`SyncSummary`] (or [`DiscoverSummary`]);
//! - the pipeline's writer lease is held by another writer (an overlapping invoke, or a
//!   function killed at its timeout whose lease has not expired): [`SyncOutcome::Skipped`],
//!   returned as success (`{"pipeline": ..., "skipped": "lease held by ..."}`): the holder is
//!   doing the work and the next scheduled invoke continues, so retrying would only add load;
//! - any other failure is an error whose [`ServerlessError::error_type`] starts with
//!   `Retryable.` (throttling, 5xx, timeouts: Lambda's own retries or the next schedule may
//!   succeed) or `NonRetryable.` (the event, the config or the data must change). Lambda's
//!   Runtime API has no way to say "do not retry": the prefix is for alarms and the on-failure
//!   destination; a non-retryable error fails the same way again, quickly.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::aws::Aws;
use crate::config::env::Environment;
use crate::config::load::{CONFIG_S3_URI_VAR, ConfigSource, load, load_s3, parse_s3_uri};
use crate::config::validate::{StoreKind, ValidatedConfig, WalStorage};
use crate::config::{ConfigError, ProcessEnv};
use crate::pipeline::sync::{SyncOptions, SyncReport, sync_pass};
use crate::pipeline::{DiscoverOptions, Observer, PipelineError};
use crate::state::StateError;

/// `DATA_DIR` when it is unset: the function's scratch space (WAL and store never live there).
pub const DEFAULT_DATA_DIR: &str = "/tmp/skipprd";

/// The variable overriding the deadline margin, in seconds.
pub const DEADLINE_MARGIN_VAR: &str = "SKIPPR_DEADLINE_MARGIN_SECONDS";

/// The default margin's share of the time left at the start of an invocation.
pub const DEFAULT_MARGIN_SHARE: f64 = 0.3;

/// The default margin's cap.
pub const DEFAULT_MARGIN_CAP: Duration = Duration::from_secs(60);

/// How long a pass waits for a writer lease held by someone else before it is skipped.
pub const LEASE_WAIT: Duration = Duration::from_secs(2);

/// Why an invocation (or the init before it) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerlessError {
    /// The event is not one this function accepts.
    #[error("invalid event: {message}")]
    Event {
        /// What is wrong.
        message: String,
    },
    /// The config could not be found, parsed or validated.
    #[error(transparent)]
    Config(Box<ConfigError>),
    /// The config would keep the WAL or the state store on the function's disk, which does
    /// not outlive the execution environment.
    #[error(
        "{setting}={value} keeps {what} on the function's disk, which is lost with the execution environment: {fix}"
    )]
    LocalState {
        /// The setting.
        setting: &'static str,
        /// Its value.
        value: String,
        /// What would live there.
        what: &'static str,
        /// How to fix it.
        fix: &'static str,
    },
    /// `SKIPPR_DEADLINE_MARGIN_SECONDS` is not a number of seconds.
    #[error("{DEADLINE_MARGIN_VAR}={value}: not a non-negative number of seconds")]
    Margin {
        /// The value.
        value: String,
    },
    /// The AWS configuration could not be loaded.
    #[error("AWS: {0}")]
    Aws(#[from] crate::aws::AwsError),
    /// The command failed.
    #[error(transparent)]
    Pipeline(Box<PipelineError>),
    /// The work panicked or was cancelled.
    #[error("the pass ended abnormally: {message}")]
    Aborted {
        /// What happened.
        message: String,
    },
}

impl From<ConfigError> for ServerlessError {
    fn from(e: ConfigError) -> Self {
        ServerlessError::Config(Box::new(e))
    }
}

impl From<PipelineError> for ServerlessError {
    fn from(e: PipelineError) -> Self {
        ServerlessError::Pipeline(Box::new(e))
    }
}

impl ServerlessError {
    /// Whether the same invocation may succeed later, unchanged.
    pub fn is_retryable(&self) -> bool {
        match self {
            ServerlessError::Event { .. }
            | ServerlessError::LocalState { .. }
            | ServerlessError::Margin { .. }
            | ServerlessError::Aws(_)
            | ServerlessError::Aborted { .. } => false,
            ServerlessError::Config(e) => e.is_retryable(),
            ServerlessError::Pipeline(e) => e.is_retryable(),
        }
    }

    /// The Lambda `errorType`: `Retryable.<Kind>` or `NonRetryable.<Kind>`.
    pub fn error_type(&self) -> String {
        let kind = match self {
            ServerlessError::Event { .. } => "Event",
            ServerlessError::Config(e) if matches!(**e, ConfigError::S3Fetch { .. }) => {
                "ConfigFetch"
            }
            ServerlessError::Config(_) | ServerlessError::Margin { .. } => "Config",
            ServerlessError::Pipeline(e) if e.is_config() => "Config",
            ServerlessError::LocalState { .. } => "LocalState",
            ServerlessError::Aws(_) => "Aws",
            ServerlessError::Pipeline(_) => "Pipeline",
            ServerlessError::Aborted { .. } => "Aborted",
        };
        let class = if self.is_retryable() {
            "Retryable"
        } else {
            "NonRetryable"
        };
        format!("{class}.{kind}")
    }
}

/// What an invocation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The pipeline; `None`: the config's only pipeline.
    pub pipeline: Option<String>,
}

/// Read an invocation event (see the module docs).
pub fn parse_event(event: &serde_json::Value) -> Result<Invocation, ServerlessError> {
    let bad = |message: String| ServerlessError::Event { message };
    let object = event.as_object().ok_or_else(|| {
        bad(format!(
            "expected a JSON object such as {{\"pipeline\": \"<name>\"}}, got {}",
            json_kind(event)
        ))
    })?;
    let body = match object.get("detail") {
        Some(detail) if !object.contains_key("pipeline") => {
            detail.as_object().ok_or_else(|| {
                bad(format!(
                    "`detail` must be an object such as {{\"pipeline\": \"<name>\"}}, got {}",
                    json_kind(detail)
                ))
            })?
        }
        _ => object,
    };
    let pipeline = match body.get("pipeline") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(name)) if !name.is_empty() => Some(name.clone()),
        Some(other) => {
            return Err(bad(format!(
                "`pipeline` must be a pipeline name, got {}",
                json_kind(other)
            )));
        }
    };
    Ok(Invocation { pipeline })
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(s) if s.is_empty() => "an empty string",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

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

fn task_root(env: &dyn Environment) -> PathBuf {
    env.var("LAMBDA_TASK_ROOT")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
}

/// Load the config from `location` with `env` under the function's defaults, and validate
/// it (`WAL_STORAGE` from the environment).
pub fn load_config<E: Environment + Clone + Send + Sync + 'static>(
    location: &ConfigLocation,
    env: E,
    aws: &Aws,
) -> Result<ValidatedConfig, ServerlessError> {
    let env = FunctionEnv::new(env);
    let loaded = match location {
        ConfigLocation::Packaged { task_root } => {
            let loaded = load(None, task_root, env)?;
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
            load_s3(&format!("s3://{bucket}/{key}"), aws, &base_dir, env)?
        }
    };
    Ok(crate::config::validate(&loaded, None)?)
}

/// [`load_config`] from the process environment: what a function's init does.
pub fn load_config_from_process(aws: &Aws) -> Result<ValidatedConfig, ServerlessError> {
    let location = config_location(&ProcessEnv)?;
    load_config(&location, ProcessEnv, aws)
}

/// What a function holds from its init to its last invocation: the AWS handle and the
/// validated config.
#[derive(Debug)]
pub struct Function {
    /// The AWS handle every invocation's clients come from.
    pub aws: Aws,
    /// The config, loaded and validated once.
    pub config: ValidatedConfig,
}

impl Function {
    /// The init of a function, from the process environment: the AWS handle, then the config
    /// (see the module docs), then [`check_remote_state`].
    pub fn init_from_process() -> Result<Function, ServerlessError> {
        let aws = Aws::load(None)?;
        let config = load_config_from_process(&aws)?;
        check_remote_state(&config)?;
        Ok(Function { aws, config })
    }

    /// One sync invocation: `deadline_ms` is the invocation's deadline (milliseconds since
    /// the epoch); the margin comes from the process environment ([`deadline_margin`]).
    /// Synchronous: run it on a blocking thread.
    pub fn sync(
        &self,
        event: &serde_json::Value,
        deadline_ms: u64,
    ) -> Result<SyncOutcome, ServerlessError> {
        let margin = deadline_margin(&ProcessEnv, remaining_until(deadline_ms))?;
        sync_invocation(
            &self.config,
            &self.aws,
            event,
            deadline_ms,
            margin,
            &mut LogObserver,
        )
    }

    /// One discover invocation. Synchronous: run it on a blocking thread.
    pub fn discover(&self, event: &serde_json::Value) -> Result<DiscoverSummary, ServerlessError> {
        discover_invocation(&self.config, &self.aws, event, &mut LogObserver)
    }
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

/// The deadline margin (see the module docs): `SKIPPR_DEADLINE_MARGIN_SECONDS` when set, else
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

/// What one sync invocation returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SyncOutcome {
    /// A pass ran.
    Synced(SyncSummary),
    /// No pass ran: another writer holds the pipeline's lease.
    Skipped {
        /// The pipeline.
        pipeline: String,
        /// Why, e.g. `lease held by ...`.
        skipped: String,
    },
}

/// The summary of one pass, as the sync function returns it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SyncSummary {
    /// The pipeline.
    pub pipeline: String,
    /// Rows committed to the WAL.
    pub rows: u64,
    /// Batches committed.
    pub batches: u64,
    /// Input bytes read.
    pub bytes: u64,
    /// Records rejected.
    pub deadletters: u64,
    /// Batches written to the destination.
    pub delivered: u64,
    /// Committed batches not yet delivered.
    pub pending: u64,
    /// Wall time of the pass.
    pub seconds: f64,
    /// Whether reading stopped because the deadline came near (the next invoke continues).
    pub stopped_for_deadline: bool,
    /// Files skipped because they could not be read (tried again next pass).
    pub files_failed: u64,
    /// AWS requests the pass sent, per service.
    pub aws_requests: std::collections::BTreeMap<String, u64>,
}

impl SyncSummary {
    fn new(pipeline: &str, report: SyncReport, seconds: f64, stopped_for_deadline: bool) -> Self {
        SyncSummary {
            pipeline: pipeline.to_owned(),
            rows: report.rows,
            batches: report.batches,
            bytes: report.bytes,
            deadletters: report.deadletters,
            delivered: report.delivered,
            pending: report.pending,
            seconds,
            stopped_for_deadline: stopped_for_deadline && report.stopped,
            files_failed: report.files_failed,
            aws_requests: report.aws_requests,
        }
    }
}

/// Sets a stop flag when a moment comes, unless dropped first.
struct StopTimer {
    cancel: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    fired: Arc<AtomicBool>,
}

impl StopTimer {
    fn start(after: Duration, stop: Arc<AtomicBool>) -> StopTimer {
        let (cancel, cancelled) = std::sync::mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let fired_in = fired.clone();
        let thread = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = cancelled.recv_timeout(after) {
                fired_in.store(true, Ordering::SeqCst);
                stop.store(true, Ordering::SeqCst);
                tracing::info!("The deadline is near: reading stops after the batch in hand.");
            }
        });
        StopTimer {
            cancel: Some(cancel),
            thread: Some(thread),
            fired,
        }
    }

    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for StopTimer {
    fn drop(&mut self) {
        drop(self.cancel.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One `sync` pass for an invocation: the pipeline the event names, stopping reading when
/// less than `margin` is left before `deadline_ms`. Synchronous: run it on a blocking thread.
pub fn sync_invocation(
    config: &ValidatedConfig,
    aws: &Aws,
    event: &serde_json::Value,
    deadline_ms: u64,
    margin: Duration,
    observer: &mut dyn Observer,
) -> Result<SyncOutcome, ServerlessError> {
    let invocation = parse_event(event)?;
    check_remote_state(config)?;
    let pipeline = config.pipeline(invocation.pipeline.as_deref())?;
    let remaining = remaining_until(deadline_ms);
    let options = SyncOptions {
        aws: Some(aws.clone()),
        lease_wait: LEASE_WAIT,
        ..SyncOptions::default()
    };
    let timer = StopTimer::start(remaining.saturating_sub(margin), options.stop.clone());
    tracing::info!(
        pipeline = %pipeline.name,
        remaining_ms = remaining.as_millis() as u64,
        margin_ms = margin.as_millis() as u64,
        "Starting a pass."
    );
    let started = Instant::now();
    let result = sync_pass(config, pipeline, &options, observer);
    let fired = timer.fired();
    drop(timer);
    match result {
        Ok(report) => Ok(SyncOutcome::Synced(SyncSummary::new(
            &pipeline.name,
            report,
            started.elapsed().as_secs_f64(),
            fired,
        ))),
        Err(PipelineError::State {
            pipeline,
            source: source @ (StateError::LeaseHeld { .. } | StateError::LeaseUnavailable { .. }),
        }) => {
            let skipped = match &source {
                StateError::LeaseHeld { holder, .. } => format!("lease held by {holder}"),
                other => other.to_string(),
            };
            tracing::warn!(pipeline = %pipeline, error = %source, "Skipped: another writer holds the lease.");
            Ok(SyncOutcome::Skipped { pipeline, skipped })
        }
        Err(e) => Err(e.into()),
    }
}

/// The schema summary the discover function returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiscoverSummary {
    /// The pipeline.
    pub pipeline: String,
    /// The saved schema's format version.
    pub version: u32,
    /// Where the schema was saved.
    pub schema_location: String,
    /// Records read.
    pub records: u64,
    /// Records rejected.
    pub deadletters: u64,
    /// Namespaces and their top-level field counts.
    pub namespaces: std::collections::BTreeMap<String, NamespaceSummary>,
    /// Wall time.
    pub seconds: f64,
}

/// One namespace of a [`DiscoverSummary`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamespaceSummary {
    /// Top-level fields.
    pub fields: usize,
    /// Records the schema was inferred from.
    pub records: u64,
}

/// `discover` for an invocation: the pipeline the event names. Synchronous.
pub fn discover_invocation(
    config: &ValidatedConfig,
    aws: &Aws,
    event: &serde_json::Value,
    observer: &mut dyn Observer,
) -> Result<DiscoverSummary, ServerlessError> {
    let invocation = parse_event(event)?;
    check_remote_state(config)?;
    let pipeline = config.pipeline(invocation.pipeline.as_deref())?;
    let options = DiscoverOptions {
        limit: None,
        progress_interval: Duration::from_secs(5),
        lease_wait: LEASE_WAIT,
        aws: Some(aws.clone()),
    };
    let report = crate::pipeline::discover(config, pipeline, &options, observer)?;
    Ok(DiscoverSummary {
        pipeline: pipeline.name.clone(),
        version: report.schema.format_version,
        schema_location: report.schema_location,
        records: report.records,
        deadletters: report.deadletters,
        namespaces: report
            .schema
            .namespaces
            .iter()
            .map(|(name, ns)| {
                (
                    name.clone(),
                    NamespaceSummary {
                        fields: ns.fields.len(),
                        records: ns.records,
                    },
                )
            })
            .collect(),
        seconds: report.elapsed.as_secs_f64(),
    })
}

/// Logs every pipeline event as a `tracing` line (JSON in the functions).
#[derive(Debug, Default)]
pub struct LogObserver;

impl Observer for LogObserver {
    fn event(&mut self, event: &crate::pipeline::Event) {
        match serde_json::to_string(event) {
            Ok(json) => tracing::info!(event = %json, "pipeline event"),
            Err(e) => tracing::warn!(error = %e, "An event could not be encoded."),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::aws::SdkFailure;

    fn fixture(name: &str) -> serde_json::Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/events")
            .join(name);
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn env(vars: &[(&str, &str)]) -> BTreeMap<String, String> {
        vars.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_fixture_events_name_their_pipeline() {
        for name in ["scheduled.json", "direct.json"] {
            assert_eq!(
                parse_event(&fixture(name)).unwrap().pipeline.as_deref(),
                Some("events"),
                "{name}"
            );
        }
    }

    #[test]
    fn an_event_without_a_pipeline_means_the_only_one_and_bad_events_are_refused() {
        let scheduled_without = serde_json::json!({"detail-type": "Scheduled Event", "detail": {}});
        assert_eq!(parse_event(&scheduled_without).unwrap().pipeline, None);
        assert_eq!(parse_event(&serde_json::json!({})).unwrap().pipeline, None);
        for bad in [
            serde_json::json!([1]),
            serde_json::json!("events"),
            serde_json::json!({"pipeline": 3}),
            serde_json::json!({"pipeline": ""}),
            serde_json::json!({"detail": "events"}),
        ] {
            let e = parse_event(&bad).unwrap_err();
            assert!(matches!(e, ServerlessError::Event { .. }), "{bad}: {e}");
            assert_eq!(e.error_type(), "NonRetryable.Event");
        }
        // A body naming its pipeline wins over a `detail` it may also carry.
        let both = serde_json::json!({"pipeline": "a", "detail": {"pipeline": "b"}});
        assert_eq!(parse_event(&both).unwrap().pipeline.as_deref(), Some("a"));
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
        crate::config::validate(&loaded, None).unwrap()
    }

    const PIPELINE: &str = "pipelines:\n  p:\n    data_source: data_sources.s\ndata_sources:\n  s:\n    File:\n      path: input\n";

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

    #[test]
    fn error_types_follow_retryability() {
        let throttled = ServerlessError::from(ConfigError::S3Fetch {
            uri: "s3://b/k".into(),
            failure: Box::new(SdkFailure {
                code: "SlowDown".into(),
                status: Some(503),
                message: "slow down".into(),
                retryable: true,
            }),
        });
        assert!(throttled.is_retryable());
        assert_eq!(throttled.error_type(), "Retryable.ConfigFetch");
        let lease = ServerlessError::from(PipelineError::State {
            pipeline: "p".into(),
            source: StateError::Aws {
                table: "t".into(),
                key: "k".into(),
                op: "GetItem",
                failure: Box::new(SdkFailure {
                    code: "InternalServerError".into(),
                    status: Some(500),
                    message: "boom".into(),
                    retryable: true,
                }),
            },
        });
        assert_eq!(lease.error_type(), "Retryable.Pipeline");
        let missing = ServerlessError::from(PipelineError::State {
            pipeline: "p".into(),
            source: StateError::TableMissing {
                table: "t".into(),
                region: "us-east-1".into(),
            },
        });
        assert_eq!(missing.error_type(), "NonRetryable.Pipeline");
    }

    #[test]
    fn the_stop_timer_fires_only_when_not_dropped_first() {
        let stop = Arc::new(AtomicBool::new(false));
        let timer = StopTimer::start(Duration::from_secs(3600), stop.clone());
        let started = Instant::now();
        drop(timer);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!stop.load(Ordering::SeqCst));

        let timer = StopTimer::start(Duration::from_millis(10), stop.clone());
        let started = Instant::now();
        while !timer.fired() {
            assert!(started.elapsed() < Duration::from_secs(10), "never fired");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(stop.load(Ordering::SeqCst));
    }
}
