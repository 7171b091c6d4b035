//! The functions' observer: every pipeline event as one log line.

use skipprd::pipeline::events::RunStamp;
use skipprd::pipeline::{Event, Observer};

/// Logs every pipeline event as a `tracing` line (JSON in the functions), stamped with the
/// invocation's run (`timestamp`, `run_id`, `phase`) like the CLI's `--output json` lines.
#[derive(Debug)]
pub struct LogObserver(RunStamp);

impl LogObserver {
    /// An observer for one invocation of `phase` (`sync`, `discover`), with a fresh run id.
    pub fn new(phase: &'static str) -> LogObserver {
        LogObserver(RunStamp::new(phase))
    }
}

impl Observer for LogObserver {
    fn event(&mut self, event: &Event) {
        match self.0.json_line(event) {
            Ok(json) => tracing::info!(event = %json, "pipeline event"),
            Err(e) => tracing::warn!(error = %e, "An event could not be encoded."),
        }
    }
}
