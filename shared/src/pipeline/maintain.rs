//! `maintain`: table maintenance of a pipeline's Iceberg destination, on demand.
//!
//! Takes the pipeline's writer lease first, like `sync`, so no delivery of the pipeline runs
//! meanwhile; commits of other writers to the same tables are compare-and-swap conflicts (a
//! compaction that loses one gives up and changes nothing). What a run does is in
//! [`crate::sinks::iceberg::maintain`] and `docs/commit-protocol.md`.

use std::time::{Duration, Instant};

use crate::config::validate::{ValidatedConfig, ValidatedPipeline};
use crate::sinks::SinkError;
use crate::sinks::iceberg::maintain::MaintenanceReport;

use super::PipelineError;
use super::events::{Event, Observer};
use super::held::Held;

/// Options of a `maintain` run.
#[derive(Debug, Clone)]
pub struct MaintainOptions {
    /// How long to wait for the writer lease (a running `sync` holds it).
    pub lease_wait: Duration,
}

impl Default for MaintainOptions {
    fn default() -> Self {
        MaintainOptions {
            lease_wait: crate::state::DEFAULT_LEASE_WAIT,
        }
    }
}

/// Maintain every table of `pipeline`'s destination: expire snapshots, compact small data
/// files, delete unreferenced files. Ends with a `MaintainComplete` event.
pub fn maintain(
    config: &ValidatedConfig,
    pipeline: &ValidatedPipeline,
    options: &MaintainOptions,
    observer: &mut dyn Observer,
) -> Result<MaintenanceReport, PipelineError> {
    let started = Instant::now();
    let name = pipeline.name.clone();
    let sink_err = |source: SinkError| PipelineError::Maintain {
        pipeline: name.clone(),
        source: Box::new(source),
    };
    let no_destination = || {
        sink_err(SinkError::Config {
            sink: String::new(),
            message: format!(
                "pipeline '{name}' has no destination (`data_sink`): maintenance is for Iceberg tables"
            ),
        })
    };
    if pipeline.destination.is_none() {
        return Err(no_destination());
    }
    let held = Held::take(&config.settings, pipeline, options.lease_wait, observer)?;
    let sink = crate::sinks::open(pipeline)
        .map_err(sink_err)?
        .ok_or_else(no_destination)?;
    let report = sink.maintain_all().map_err(sink_err)?;
    drop(sink);
    drop(held);
    tracing::info!(pipeline = %name, ?report, "Maintained the destination's tables.");
    observer.event(&Event::MaintainComplete {
        pipeline: name.clone(),
        tables: report.tables,
        snapshots_expired: report.snapshots_expired,
        files_compacted_from: report.files_compacted_from,
        files_compacted_to: report.files_compacted_to,
        files_deleted: report.files_deleted,
        bytes_freed: report.bytes_freed,
        seconds: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
    });
    Ok(report)
}
