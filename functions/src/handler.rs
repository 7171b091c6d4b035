//! The two functions' work: a [`Function`] holds what the init made (AWS handle, validated
//! config) and runs one `sync` pass or one `discover` per invocation, over the core's
//! [`sync_pass`] and [`skipprd::pipeline::discover()`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
            &mut LogObserver,
        )
    }

    /// One discover invocation. Synchronous: run it on a blocking thread.
    pub fn discover(&self, event: &serde_json::Value) -> Result<DiscoverSummary, ServerlessError> {
        discover_invocation(&self.config, &self.aws, event, &mut LogObserver)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
