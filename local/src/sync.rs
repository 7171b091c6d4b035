//! `skipprd sync`: passes over one or every pipeline, once or on a schedule.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use skipprd::config::validate::ValidatedConfig;
use skipprd::pipeline::events::RunStamp;
use skipprd::pipeline::sync::{SyncOptions, sync_pass};
use skipprd::pipeline::{Event, PipelineError};

use crate::cli::{OutputMode, SyncArgs};
use crate::output;

/// Run `sync` as the flags say. Pass errors are reported as they happen; the first one is
/// returned at the end, so the exit code says a pass failed.
pub fn run(
    config: &ValidatedConfig,
    args: &SyncArgs,
    mode: OutputMode,
    stamp: &RunStamp,
) -> Result<(), PipelineError> {
    let pipelines = config.pipelines_or_all(args.pipeline.as_deref())?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        if let Err(e) = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst)) {
            tracing::warn!(error = %e, "Could not install the SIGINT/SIGTERM handler.");
        }
    }
    if pipelines.iter().any(|p| p.chaos_mode) {
        start_chaos();
    }
    let options = SyncOptions {
        stop: Arc::clone(&stop),
        progress_interval: status_interval(mode),
        ..SyncOptions::default()
    };
    let mut observer = output::observer(mode, stamp);
    if config.settings.reset_offsets {
        // RESET_OFFSETS=true: each pipeline starts over once, before its first pass.
        for pipeline in &pipelines {
            let options = skipprd::pipeline::ResetOptions {
                confirm: true,
                ..skipprd::pipeline::ResetOptions::default()
            };
            skipprd::pipeline::reset(config, pipeline, &options, observer.as_mut())?;
        }
    }
    if config.settings.reset_metadata {
        // RESET_METADATA=true: each pipeline's saved schema is read again from its source
        // once, before its first pass (merged, as `discover` always does: batches in the WAL
        // and the tables use what is saved, so nothing is dropped; `reset` starts over).
        for pipeline in &pipelines {
            let options = skipprd::pipeline::DiscoverOptions {
                limit: None,
                progress_interval: status_interval(mode),
                lease_wait: skipprd::state::DEFAULT_LEASE_WAIT,
                aws: None,
            };
            skipprd::pipeline::discover(config, pipeline, &options, observer.as_mut())?;
        }
    }
    let mut first_error: Option<PipelineError> = None;
    let mut next_due: Vec<Instant> = vec![Instant::now(); pipelines.len()];
    loop {
        for (i, pipeline) in pipelines.iter().enumerate() {
            if stop.load(Ordering::SeqCst) || Instant::now() < next_due[i] {
                continue;
            }
            next_due[i] = Instant::now() + pipeline.sync_frequency;
            if let Err(e) = sync_pass(config, pipeline, &options, observer.as_mut()) {
                if e.is_config() {
                    return Err(e);
                }
                if mode == OutputMode::Json {
                    observer.event(&Event::SyncError {
                        pipeline: Some(pipeline.name.clone()),
                        message: e.to_string(),
                        retryable: e.is_retryable(),
                    });
                }
                eprintln!("error: {e}");
                first_error.get_or_insert(e);
            }
        }
        if args.once || stop.load(Ordering::SeqCst) {
            break;
        }
        let wake = next_due.iter().min().copied().unwrap_or_else(Instant::now);
        while Instant::now() < wake && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(
                Duration::from_millis(200).min(wake.saturating_duration_since(Instant::now())),
            );
        }
    }
    match first_error {
        // Already reported; the error itself decides the exit code.
        Some(e) => Err(PipelineError::Reported(Box::new(e))),
        None => Ok(()),
    }
}

/// How often a long pass says `sync_status`: the progress display redraws twice a second;
/// lines for scripts and logs come every 10 s.
fn status_interval(mode: OutputMode) -> Duration {
    match mode {
        OutputMode::Progress => Duration::from_millis(500),
        OutputMode::Text | OutputMode::Json => Duration::from_secs(10),
    }
}

/// Chaos mode: SIGKILL this process at a random moment 15-60 s from now, to prove recovery.
fn start_chaos() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let delay = Duration::from_secs(15 + u64::from(nanos % 46));
    tracing::warn!(
        seconds = delay.as_secs(),
        "Chaos mode: this process will SIGKILL itself."
    );
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        tracing::error!("Chaos mode: SIGKILL now.");
        let pid = std::process::id().to_string();
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid])
            .status();
        if killed.is_err() {
            std::process::abort();
        }
    });
}
