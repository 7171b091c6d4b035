//! The functions' observer: every pipeline event as one log line.

use skipprd::pipeline::{Event, Observer};

/// Logs every pipeline event as a `tracing` line (JSON in the functions).
#[derive(Debug, Default)]
pub struct LogObserver;

impl Observer for LogObserver {
    fn event(&mut self, event: &Event) {
        match serde_json::to_string(event) {
            Ok(json) => tracing::info!(event = %json, "pipeline event"),
            Err(e) => tracing::warn!(error = %e, "An event could not be encoded."),
        }
    }
}
