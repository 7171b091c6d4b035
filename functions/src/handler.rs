//! The two functions' work: a [`Function`] holds what the init made (AWS handle, validated
//! config) and runs one `sync` pass or one `discover` per invocation, over the core's
//! [`sync_pass`] and [`skipprd::pipeline::discover()`].

use std::time::{Duration, Instant};

use serde::Serialize;
use skipprd::aws::Aws;
use skipprd::config::ProcessEnv;
use skipprd::config::validate::ValidatedConfig;
use skipprd::pipeline::sync::{SyncOptions, SyncReport, sync_pass};
use skipprd::pipeline::{DiscoverOptions, Observer, PipelineError};
use skipprd::state::StateError;

use crate::env::{check_remote_state, deadline_margin, load_config_from_process, remaining_until};
use crate::error::ServerlessError;
use crate::event::parse_event;
use crate::observer::LogObserver;

/// How long a pass waits for a writer lease held by someone else before it is skipped.
pub const LEASE_WAIT: Duration = Duration::from_secs(2);

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
    /// (see the crate docs), then [`check_remote_state`].
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
            &mut LogObserver::new("sync"),
        )
    }

    /// One discover invocation. Synchronous: run it on a blocking thread.
    pub fn discover(&self, event: &serde_json::Value) -> Result<DiscoverSummary, ServerlessError> {
        discover_invocation(
            &self.config,
            &self.aws,
            event,
            &mut LogObserver::new("discover"),
        )
    }
}

/// What one sync invocation returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SyncOutcome {
    /// A pass ran: the pipeline and the pass's report, its fields at the top level (`rows`,
    /// ..., `stopped_for_deadline`, `aws_requests`), as in the CLI's `sync_complete` event.
    Synced {
        /// The pipeline.
        pipeline: String,
        /// What the pass did.
        #[serde(flatten)]
        report: SyncReport,
    },
    /// No pass ran: another writer holds the pipeline's lease.
    Skipped {
        /// The pipeline.
        pipeline: String,
        /// Why, e.g. `lease held by ...`.
        skipped: String,
    },
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
        deadline: Some(Instant::now() + remaining.saturating_sub(margin)),
        ..SyncOptions::default()
    };
    tracing::info!(
        pipeline = %pipeline.name,
        remaining_ms = remaining.as_millis() as u64,
        margin_ms = margin.as_millis() as u64,
        "Starting a pass."
    );
    match sync_pass(config, pipeline, &options, observer) {
        Ok(report) => Ok(SyncOutcome::Synced {
            pipeline: pipeline.name.clone(),
            report,
        }),
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
    let report = skipprd::pipeline::discover(config, pipeline, &options, observer)?;
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
