//! The skipprd Lambda functions (`skipprd-sync`, `skipprd-discover`): reading the invocation
//! event ([`event`]), loading the config once per init and refusing state that would live on
//! the function's disk ([`mod@env`]), one deadline-bounded `sync` pass or one `discover`
//! ([`handler`]), how each error is classified ([`error`]), the log lines ([`observer`]), and
//! the `lambda_runtime` loop around a blocking handler ([`serve`]). The work itself is the
//! core's (`skipprd`); this crate only decides what an invocation means.
//!
//! ## Event
//! Either a direct invoke `{"pipeline": "<name>"}`, an EventBridge rule's constant input (the
//! same body), or an EventBridge scheduled event whose `detail` is `{"pipeline": "<name>"}`.
//! Without a pipeline name the config's only pipeline is used (as the CLI does); with several
//! pipelines that is a non-retryable event error.
//!
//! ## Config
//! Loaded and validated once per execution environment, at init: from `SKIPPR_CONFIG_S3_URI` (`s3://bucket/key`, fetched
//! with the S3 client; relative paths resolve against `LAMBDA_TASK_ROOT`) when set, else
//! `SKIPPR_CONFIG_FILE`, else the first config file name (`skippr.yml`, ...) in
//! `LAMBDA_TASK_ROOT` (a function with no config file fails). An init that failed is not kept:
//! the next invocation of the same warm environment tries it again (the schedule may fire
//! before the config object is uploaded, an IAM policy may still be propagating, S3 may answer
//! 5xx), so the environment recovers once the cause is gone instead of returning the old error
//! for its lifetime. `DATA_DIR` defaults to
//! [`env::DEFAULT_DATA_DIR`] (`/tmp` is the only writable place of a function), and every
//! pipeline's local state goes there whatever its `data_dir` says
//! ([`env::keep_state_in_scratch`]): a function creates nothing in the read-only task root.
//!
//! The WAL and the state store must outlive the execution environment: a config whose WAL is on
//! disk (`WAL_STORAGE` other than `s3`) or whose store is the embedded one is refused,
//! non-retryably ([`env::check_remote_state`]). The saved schema goes to the skippr bucket when one
//! is configured (`skipprd_el_storage_mode: s3`, its default then), where `discover` writes it
//! and the CLI reads it; with `local` it lives under `DATA_DIR`, and a cold start re-infers it
//! from the data it reads.
//!
//! ## Deadline
//! A pass stops reading new batches when the invocation's deadline is nearer than a margin
//! ([`SyncOptions::deadline`](skipprd::pipeline::sync::SyncOptions::deadline), checked between
//! batches):
//! `SKIPPR_DEADLINE_MARGIN_SECONDS` (decimal seconds), default 30 % of the time left when the
//! invocation starts, capped at 60 s ([`env::deadline_margin`]). The batch being committed is
//! finished and what was committed is delivered before the function returns, so the margin
//! must cover one batch plus a delivery.
//!
//! ## Outcomes and errors
//! - success: the pass's [`skipprd::pipeline::sync::SyncReport`] with its pipeline
//!   ([`handler::SyncOutcome::Synced`]), or a [`handler::DiscoverSummary`];
//! - the pipeline's writer lease is held by another writer (an overlapping invoke, or a
//!   function killed at its timeout whose lease has not expired): [`handler::SyncOutcome::Skipped`],
//!   returned as success (`{"pipeline": ..., "skipped": "lease held by ..."}`): the holder is
//!   doing the work and the next scheduled invoke continues, so retrying would only add load;
//! - any other failure is an error whose [`ServerlessError::error_type`] starts with
//!   `Retryable.` (throttling, 5xx, timeouts: Lambda's own retries or the next schedule may
//!   succeed) or `NonRetryable.` (the event, the config or the data must change). Lambda's
//!   Runtime API has no way to say "do not retry": the prefix is for alarms and the on-failure
//!   destination; a non-retryable error fails the same way again, quickly.

use std::sync::{Arc, Mutex, PoisonError};

use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};

pub mod env;
pub mod error;
pub mod event;
pub mod handler;
pub mod observer;

pub use error::ServerlessError;
pub use handler::Function;

/// JSON log lines on stderr (one object per line, for CloudWatch), level from `RUST_LOG`
/// (default `info`). Events and errors are logged; config values and secrets are not.
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_current_span(false)
        .init();
}

/// The Lambda error for `e`: `errorType` says whether retrying may help.
pub fn diagnostic(e: &ServerlessError) -> Diagnostic {
    Diagnostic {
        error_type: e.error_type(),
        error_message: e.to_string(),
    }
}

/// The function of this execution environment once an init succeeded.
#[derive(Default)]
struct Initialised(Mutex<Option<Arc<Function>>>);

impl Initialised {
    /// The function, initialising it now if no init has succeeded yet (a failed init is never
    /// kept: the next invocation tries again).
    fn get(&self, name: &str) -> Result<Arc<Function>, ServerlessError> {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(function) = slot.as_ref() {
            return Ok(function.clone());
        }
        let function = Arc::new(Function::init_from_process()?);
        tracing::info!(
            function = name,
            pipelines = function.config.pipelines.len(),
            "Initialised on invocation, after a failed init."
        );
        *slot = Some(function.clone());
        Ok(function)
    }
}

/// Init (AWS handle, config), then serve invocations with `handle` on a blocking thread until
/// the Runtime API goes away. An init that fails is logged and tried again by each invocation
/// until one succeeds; the invocation returns the error of its own attempt.
pub fn serve<F>(name: &'static str, handle: F) -> Result<(), lambda_runtime::Error>
where
    F: Fn(&Function, serde_json::Value, u64) -> Result<serde_json::Value, ServerlessError>
        + Send
        + Sync
        + 'static,
{
    init_logging();
    let started = std::time::Instant::now();
    let initialised = Initialised::default();
    match Function::init_from_process() {
        Ok(f) => {
            tracing::info!(
                function = name,
                pipelines = f.config.pipelines.len(),
                init_ms = started.elapsed().as_secs_f64() * 1000.0,
                "Initialised."
            );
            *initialised.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(f));
        }
        Err(e) => {
            tracing::error!(function = name, error = %e, error_type = %e.error_type(), "Init failed; the next invocation tries again.")
        }
    }
    let state = Arc::new((initialised, handle));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(lambda_runtime::run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| {
            let state = state.clone();
            async move {
                let (payload, context) = (event.payload, event.context);
                let request_id = context.request_id.clone();
                let context_id = request_id.clone();
                let outcome = tokio::task::spawn_blocking(move || {
                    let (initialised, handle) = &*state;
                    match initialised.get(name) {
                        Ok(function) => match handle(&function, payload, context.deadline) {
                            Ok(summary) => {
                                tracing::info!(request_id = %request_id, summary = %summary, "Invocation done.");
                                Ok(summary)
                            }
                            Err(e) => Err(logged(&request_id, &e)),
                        },
                        Err(e) => Err(logged(&request_id, &e)),
                    }
                })
                .await;
                match outcome {
                    Ok(result) => result,
                    Err(join) => Err(logged(
                        &context_id,
                        &ServerlessError::Aborted {
                            message: join.to_string(),
                        },
                    )),
                }
            }
        },
    )))
}

/// Log a failed invocation and turn it into the Lambda error.
fn logged(request_id: &str, e: &ServerlessError) -> Diagnostic {
    tracing::error!(request_id, error = %e, error_type = %e.error_type(), "Invocation failed.");
    diagnostic(e)
}
