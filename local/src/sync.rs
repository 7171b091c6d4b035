//! `skipprd sync`: passes over one or every pipeline, once or on a schedule.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use skipprd::config::validate::ValidatedConfig;
use skipprd::pipeline::events::RunStamp;
use skipprd::pipeline::sync::{SyncOptions, run_passes};
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
    let mut on_error = |pipeline: &skipprd::config::ValidatedPipeline, e: &PipelineError| {
        if mode == OutputMode::Json {
            output::observer(mode, stamp).event(&Event::SyncError {
                pipeline: Some(pipeline.name.clone()),
                message: e.to_string(),
                retryable: e.is_retryable(),
            });
        }
        eprintln!("error: {e}");
    };
    run_passes(
        config,
        &pipelines,
        &options,
        args.once,
        observer.as_mut(),
        &mut on_error,
    )?;
    Ok(())
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
