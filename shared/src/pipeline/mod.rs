//! The commands' core logic, shared by the CLI and the Lambda functions.
//!
//! Each command takes a validated pipeline and an [`events::Observer`] that receives
//! [`events::Event`]s as the work goes on; the binaries decide how to show them (a progress
//! bar, text lines, or one JSON object per line).

mod delivery;
pub mod discover;
pub mod error;
pub mod events;
mod held;
pub mod maintain;
pub mod metadata;
mod replay;
pub mod reset;
mod schema_save;
pub mod source;
pub mod store;
pub mod sync;
#[cfg(test)]
mod testing;
mod typing;

pub use discover::{DiscoverOptions, DiscoverReport, discover};
pub use error::PipelineError;
pub use events::{Event, Observer};
pub use maintain::{MaintainOptions, maintain};
pub use reset::{ResetOptions, ResetReport, reset};
pub use store::create_store;

/// Logs rejected records: every one with its source, line and error (never silently
/// dropped), the first [`DeadletterLog::RAW_LOGGED`] of a run also with the start of their text.
#[derive(Debug)]
pub(crate) struct DeadletterLog {
    pipeline: String,
    count: u64,
    /// Records logged since the last [`DeadletterLog::take`], when collecting.
    pending: Option<Vec<crate::deadletter::Deadletter>>,
}

impl DeadletterLog {
    /// How many rejected records per run are logged with their raw text.
    pub(crate) const RAW_LOGGED: u64 = 20;

    /// A log for `pipeline`.
    pub(crate) fn new(pipeline: &str) -> Self {
        DeadletterLog {
            pipeline: pipeline.to_owned(),
            count: 0,
            pending: None,
        }
    }

    /// A log for `pipeline` that also keeps each record until [`DeadletterLog::take`] (sync
    /// commits them to the WAL with their batch).
    pub(crate) fn collecting(pipeline: &str) -> Self {
        DeadletterLog {
            pending: Some(Vec::new()),
            ..DeadletterLog::new(pipeline)
        }
    }

    /// The records logged since the last call (none unless collecting).
    pub(crate) fn take(&mut self) -> Vec<crate::deadletter::Deadletter> {
        self.pending
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Log one rejected record.
    pub(crate) fn log(&mut self, dl: &crate::deadletter::Deadletter) {
        self.count += 1;
        if let Some(pending) = self.pending.as_mut() {
            pending.push(dl.clone());
        }
        let pipeline = self.pipeline.as_str();
        if self.count <= Self::RAW_LOGGED {
            let raw: String = dl.raw.chars().take(200).collect();
            tracing::warn!(pipeline, source = %dl.source_uri, line = dl.line, offset = dl.offset, code = dl.code.as_str(), error = %dl.error, raw = %raw, "Rejected a record.");
        } else {
            tracing::warn!(pipeline, source = %dl.source_uri, line = dl.line, offset = dl.offset, code = dl.code.as_str(), error = %dl.error, "Rejected a record.");
        }
    }

    /// Records logged so far.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }
}
