//! `skipprd deadletters replay`: the files of the pipeline's deadletter sink read back as a
//! source. Each replay batch carries a `_replayed` part naming the files whose records it
//! holds; once the WAL forgets such a batch, `replayed#{file}` markers in the state store
//! remember them (see [`super::delivery`]), so a file is never replayed twice.

use std::sync::Arc;

use crate::config::ConfigError;
use crate::config::connectors::ConnectorSet;
use crate::config::validate::ValidatedPipeline;
use crate::state::{StateStore, keys};
use crate::wal::{BatchPart, PartKind, Wal};

use super::PipelineError;

/// The WAL part naming the deadletter files a replay batch holds the records of.
pub const REPLAYED_NAMESPACE: &str = crate::wal::REPLAYED_PART;

pub(super) fn replayed_batch(
    files: &[String],
) -> Result<arrow::array::RecordBatch, arrow::error::ArrowError> {
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("file", arrow::datatypes::DataType::Utf8, false),
    ]));
    arrow::array::RecordBatch::try_new(
        schema,
        vec![Arc::new(arrow::array::StringArray::from_iter_values(files))],
    )
}

/// The file names in a batch's `_replayed` part.
pub(super) fn replayed_names(parts: &[BatchPart]) -> Vec<String> {
    use arrow::array::{Array, AsArray};
    parts
        .iter()
        .filter(|p| p.kind() == PartKind::Replayed)
        .filter_map(|p| p.batch.column_by_name("file"))
        .filter_map(|c| c.as_string_opt::<i32>().cloned())
        .flat_map(|a| {
            (0..a.len())
                .filter(|&i| a.is_valid(i))
                .map(|i| a.value(i).to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `deadletters replay` with a deadletter sink other than `File` or `S3`: not supported yet.
pub(super) fn replay_unsupported(pipeline: &ValidatedPipeline) -> ConfigError {
    let (sink, kind) = pipeline
        .deadletter_sink
        .as_ref()
        .map_or(("(none)".to_owned(), "?"), |d| {
            (d.name.clone(), d.connector.type_name())
        });
    ConfigError::UnsupportedSetting {
        setting: format!("pipelines.{}.deadletter_sink", pipeline.name),
        value: format!("deadletter_sinks.{sink} ({kind})"),
        note: Some(format!(
            "`deadletters replay` reads the objects of a `File` or `S3` deadletter sink; replay from an `{kind}` deadletter sink is not supported yet"
        )),
    }
}

/// What `skipprd deadletters replay` replays, and where it leaves the source.
pub(super) struct ReplayPlan<'a> {
    /// The deadletter sink the objects are in.
    pub(super) sink: &'a crate::sinks::deadletter::DeadletterSink,
    /// The deadletter objects not replayed yet (names relative to the sink's target).
    pub(super) files: Vec<String>,
    /// The source position every replay batch records (unchanged by a replay).
    pub(super) position: Vec<u8>,
}

impl<'a> ReplayPlan<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        pipeline: &ValidatedPipeline,
        settings: &crate::config::validate::Settings,
        base_dir: &std::path::Path,
        deadletters: Option<&'a crate::sinks::deadletter::DeadletterSink>,
        store: &dyn StateStore,
        partition: &str,
        wal: &dyn Wal,
        position: Option<&[u8]>,
    ) -> Result<Self, PipelineError> {
        let name = pipeline.name.clone();
        let Some(sink) = deadletters else {
            return Err(ConfigError::UnsupportedSetting {
                setting: format!("pipelines.{name}.deadletter_sink"),
                value: "(none)".into(),
                note: Some(
                    "`deadletters replay` reads the objects of a `File` or `S3` deadletter sink"
                        .into(),
                ),
            }
            .into());
        };
        // Replayed already: recorded in the state store, or named in a WAL batch.
        let state_err = |source| PipelineError::State {
            pipeline: name.clone(),
            source,
        };
        let mut replayed: std::collections::BTreeSet<String> = store
            .scan_prefix(partition, keys::REPLAYED_PREFIX)
            .map_err(state_err)?
            .into_iter()
            .filter_map(|(sort, _)| sort.strip_prefix(keys::REPLAYED_PREFIX).map(str::to_owned))
            .collect();
        for meta in wal.batches() {
            if meta.parts.iter().any(|p| p.kind() == PartKind::Replayed) {
                let parts = wal.read(meta.id).map_err(|source| PipelineError::Wal {
                    pipeline: name.clone(),
                    source,
                })?;
                replayed.extend(replayed_names(&parts));
            }
        }
        let files = sink
            .pending(&replayed)
            .map_err(|source| PipelineError::Sink {
                pipeline: name.clone(),
                source: Box::new(source),
            })?;
        let position = match position {
            Some(p) => p.to_vec(),
            // Never synced: the source's starting checkpoint.
            None => super::source::open_source_at(pipeline, settings, base_dir, None)?
                .checkpoint()
                .map_err(|source| PipelineError::Source {
                    pipeline: name.clone(),
                    source,
                })?,
        };
        Ok(ReplayPlan {
            sink,
            files,
            position,
        })
    }

    /// Move the objects replayed in this pass (committed to the WAL, which names them) to
    /// `replayed/` (best effort: an object left behind, or left in both places by a crash
    /// part-way through an S3 move, is recognised as replayed by its marker).
    pub(super) fn set_aside(&self, names: &[String]) {
        for name in names {
            let Some(from) = self
                .files
                .iter()
                .find(|f| crate::objects::file_name(f) == name.as_str())
            else {
                continue;
            };
            if let Err(e) = self.sink.set_aside(from) {
                tracing::warn!(file = %self.sink.target().location_of(from), error = %e, "Could not move a replayed deadletter file aside; it stays marked as replayed.");
            }
        }
    }
}
