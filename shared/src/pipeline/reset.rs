//! A WAL that restarts its ids, noticed; and `skipprd reset`, which starts a pipeline over on
//! purpose.
//!
//! Batch ids are what make delivery exactly-once: the state store's `position` and `ack`
//! items and every table's `skippr.landed.<pipeline>` name WAL batch ids, and a batch at or
//! below a table's landed id is skipped as delivered. A disk WAL that is lost (a deleted
//! state directory, a new machine) starts again at id 1 while those ids stay high, so new
//! batches would be skipped and reclaimed: rows lost without a word. So every pass first
//! checks (`check_continues`, `check_tables`) that no id the state store or the tables
//! hold is above the WAL's newest id, and refuses to run otherwise, naming both ids.
//!
//! [`reset`] is the deliberate way out. Under the writer lease it records the **id floor**
//! (`wal#floor`): the highest id any of them holds (position, acknowledgements, an earlier
//! floor, the WAL's own newest id, every table's landed id). Then it deletes the position and
//! the acknowledgements and empties the WAL. The next pass reads the source from its start
//! and its WAL numbers batches from floor + 1, so no new batch is ever at or below an id that
//! landed before (nothing skipped), and no id is used twice (no batch delivered twice, no
//! deadletter object `b{id}` overwritten). See `docs/wal.md`, "A WAL that restarts".

use std::time::Duration;

use serde::Serialize;

use crate::config::validate::{ValidatedConfig, ValidatedPipeline, WalLocation};
use crate::state::{Condition, StateKey, StateStore, keys};

use super::PipelineError;
use super::events::{Event, Observer};
use super::held::Held;
use super::sync::{WalPlace, decode_position, open_wal};

/// What the state store says about the batch ids a pipeline has used.
#[derive(Debug, Clone, Default)]
pub(super) struct Known {
    /// The `position` item: the newest batch id it follows, and the source checkpoint.
    pub(super) position: Option<(u64, Vec<u8>)>,
    /// The destination's acknowledgement (`ack`).
    pub(super) ack: Option<u64>,
    /// The deadletter sink's acknowledgement (`ack#deadletters`).
    pub(super) dead_ack: Option<u64>,
    /// The id floor of the last reset (`wal#floor`).
    pub(super) floor: Option<u64>,
}

impl Known {
    /// Read the items of `partition`.
    pub(super) fn read(
        store: &dyn StateStore,
        partition: &str,
        pipeline: &str,
    ) -> Result<Known, PipelineError> {
        let state_err = |source| PipelineError::State {
            pipeline: pipeline.to_owned(),
            source,
        };
        let id = |sort: &str| -> Result<Option<u64>, PipelineError> {
            let key = StateKey::new(partition, sort);
            store
                .get(&key)
                .map_err(state_err)?
                .map(|item| decode_id(&key, &item.value))
                .transpose()
                .map_err(state_err)
        };
        let position_key = StateKey::new(partition, keys::POSITION);
        let position = store
            .get(&position_key)
            .map_err(state_err)?
            .map(|item| decode_position(&position_key, &item.value))
            .transpose()
            .map_err(state_err)?;
        Ok(Known {
            position,
            ack: id(keys::ACK)?,
            dead_ack: id(keys::DEADLETTER_ACK)?,
            floor: id(keys::WAL_FLOOR)?,
        })
    }

    /// The highest id an item names, with what holds it; `None` when the store knows none.
    fn highest(&self) -> Option<(u64, &'static str)> {
        [
            (
                self.position.as_ref().map(|(id, _)| *id),
                "the state store's source position (`position`) follows batch",
            ),
            (
                self.ack,
                "the state store's acknowledgement from the destination (`ack`) is batch",
            ),
            (
                self.dead_ack,
                "the state store's acknowledgement from the deadletter sink (`ack#deadletters`) is batch",
            ),
            (
                self.floor,
                "the id floor of the last `skipprd reset` (`wal#floor`) is batch",
            ),
        ]
        .into_iter()
        .filter_map(|(id, what)| id.map(|id| (id, what)))
        // The first of equals: the position, which every other id follows.
        .fold(None, |best: Option<(u64, &'static str)>, (id, what)| match best {
            Some((b, _)) if b >= id => best,
            _ => Some((id, what)),
        })
    }

    /// Whether the store knows nothing of earlier batches (a new pipeline, or a store that was
    /// lost with the WAL).
    pub(super) fn is_empty(&self) -> bool {
        self.highest().is_none()
    }

    /// The floor to open the WAL above (0 without one).
    pub(super) fn floor(&self) -> u64 {
        self.floor.unwrap_or(0)
    }
}

/// Refuse to run when the state store names a batch above the WAL's newest one: the WAL was
/// lost or replaced, and going on would skip new batches as delivered.
pub(super) fn check_continues(
    known: &Known,
    wal_next: u64,
    pipeline: &str,
) -> Result<(), PipelineError> {
    match known.highest() {
        Some((id, holder)) if id >= wal_next => Err(PipelineError::WalRestarted {
            pipeline: pipeline.to_owned(),
            wal_next,
            holder: holder.to_owned(),
            id,
        }),
        _ => Ok(()),
    }
}

/// [`check_continues`] for the destination's tables, when the state store knows nothing
/// (else its items already bound every landed id): refuse when a table shows a batch of this
/// pipeline above the WAL's newest one landed.
pub(super) fn check_tables(
    sink: &dyn crate::sinks::Sink,
    wal_next: u64,
    pipeline: &str,
) -> Result<(), PipelineError> {
    let landed = sink.landed_any().map_err(|source| PipelineError::Sink {
        pipeline: pipeline.to_owned(),
        source: Box::new(source),
    })?;
    if landed >= wal_next {
        return Err(PipelineError::WalRestarted {
            pipeline: pipeline.to_owned(),
            wal_next,
            holder: format!(
                "a table of the destination ({}) shows as landed (`skippr.landed.*`) batch",
                sink.location()
            ),
            id: landed,
        });
    }
    Ok(())
}

/// Options of [`reset`].
#[derive(Debug, Clone)]
pub struct ResetOptions {
    /// Clear the state (`--yes`); without it nothing is changed and [`reset`] fails with
    /// [`PipelineError::ResetNotConfirmed`] after reporting what it would clear.
    pub confirm: bool,
    /// How long to wait for the writer lease.
    pub lease_wait: Duration,
    /// The AWS handle for the AWS backends (loaded from the environment when `None`).
    pub aws: Option<crate::aws::Aws>,
}

impl Default for ResetOptions {
    fn default() -> Self {
        ResetOptions {
            confirm: false,
            lease_wait: crate::state::DEFAULT_LEASE_WAIT,
            aws: None,
        }
    }
}

/// What [`reset`] found, and clears when confirmed: the `reset` event's fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ResetReport {
    /// Whether the state was cleared (`false`: only reported).
    pub applied: bool,
    /// The batch id the deleted source position followed (the source is read again from its
    /// start).
    pub position_batch: Option<u64>,
    /// The deleted acknowledgement of the destination.
    pub acked: Option<u64>,
    /// The deleted acknowledgement of the deadletter sink.
    pub deadletters_acked: Option<u64>,
    /// Batches the WAL held, which are dropped (their rows are read again from the source).
    pub wal_batches: u64,
    /// The id the WAL would have given its next batch.
    pub wal_next: u64,
    /// The highest id of this pipeline landed in any table of the destination.
    pub landed: u64,
    /// The id floor recorded: the next batch gets `floor + 1`.
    pub floor: u64,
}

/// `skipprd reset`: start `pipeline` over on purpose (see the module docs). Takes the writer
/// lease. Without [`ResetOptions::confirm`] it only reports what it would clear (a `reset`
/// event with `applied: false`) and fails with [`PipelineError::ResetNotConfirmed`].
pub fn reset(
    config: &ValidatedConfig,
    pipeline: &ValidatedPipeline,
    options: &ResetOptions,
    observer: &mut dyn Observer,
) -> Result<ResetReport, PipelineError> {
    let name = pipeline.name.clone();
    let settings = &config.settings;
    let state_err = |source| PipelineError::State {
        pipeline: name.clone(),
        source,
    };
    let wal_err = |source| PipelineError::Wal {
        pipeline: name.clone(),
        source,
    };
    let aws = super::held::pipeline_aws(options.aws.as_ref(), pipeline)?;
    let held = Held::take_with(
        settings,
        pipeline,
        options.lease_wait,
        aws.as_ref(),
        observer,
    )?;
    let (store, partition) = (&*held.store, held.partition.as_str());
    let fence = Some(held.fence());
    let known = Known::read(store, partition, &name)?;
    let (mut wal, _recovery) = open_wal(
        WalPlace {
            pipeline: &name,
            location: &pipeline.wal,
            store,
            partition,
            fence,
            recorded_through: known.position.as_ref().map_or(0, |(id, _)| *id),
            floor: known.floor(),
            aws: aws.as_ref(),
        },
        &crate::wal::WalOptions::default(),
    )?;
    let wal_next = wal.next_id().0;
    let wal_batches = wal.batches().len() as u64;
    let sink =
        crate::sinks::open_any(pipeline, aws.as_ref()).map_err(|source| PipelineError::Sink {
            pipeline: name.clone(),
            source: Box::new(source),
        })?;
    let landed = match &sink {
        Some(sink) => {
            crate::sinks::Sink::landed_any(sink.as_ref()).map_err(|source| PipelineError::Sink {
                pipeline: name.clone(),
                source: Box::new(source),
            })?
        }
        None => 0,
    };
    let floor = known
        .highest()
        .map_or(0, |(id, _)| id)
        .max(wal_next.saturating_sub(1))
        .max(landed);
    let mut report = ResetReport {
        applied: false,
        position_batch: known.position.as_ref().map(|(id, _)| *id),
        acked: known.ack,
        deadletters_acked: known.dead_ack,
        wal_batches,
        wal_next,
        landed,
        floor,
    };
    if !options.confirm {
        observer.event(&Event::Reset {
            pipeline: name.clone(),
            report: report.clone(),
        });
        return Err(PipelineError::ResetNotConfirmed {
            pipeline: name.clone(),
        });
    }
    // The floor first: from here on no id at or below it is handed out again, whatever
    // crashes next (a rerun of `reset` finishes the rest).
    let key = |sort: &str| StateKey::new(partition, sort);
    store
        .put(
            &key(keys::WAL_FLOOR),
            &floor.to_le_bytes(),
            Condition::Any,
            fence,
        )
        .map_err(state_err)?;
    for sort in [keys::POSITION, keys::ACK, keys::DEADLETTER_ACK] {
        store
            .delete(&key(sort), Condition::Any, fence)
            .map_err(state_err)?;
    }
    // Empty the WAL: its batches' rows are read again from the source.
    match &pipeline.wal {
        WalLocation::Disk { dir } => {
            drop(wal);
            remove_disk_wal(dir).map_err(|e| PipelineError::Io {
                pipeline: name.clone(),
                path: dir.clone(),
                message: e.to_string(),
            })?;
        }
        WalLocation::S3 { .. } => {
            let newest = wal.next_id().0.saturating_sub(1);
            if !wal.batches().is_empty() {
                wal.reclaim_through(crate::wal::BatchId(newest))
                    .map_err(wal_err)?;
            }
            drop(wal);
        }
    }
    drop(sink);
    drop(held);
    tracing::warn!(pipeline = %name, floor, "Reset the pipeline: the source is read again from its start, batch ids go on above the floor.");
    report.applied = true;
    observer.event(&Event::Reset {
        pipeline: name,
        report: report.clone(),
    });
    Ok(report)
}

/// Delete a disk WAL's segment files, oldest first (a crash leaves a suffix, which the next
/// pass refuses as behind the floor until `reset` is run again), then its directory.
fn remove_disk_wal(dir: &std::path::Path) -> std::io::Result<()> {
    let mut files: Vec<std::path::PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    files.sort();
    for file in &files {
        std::fs::remove_file(file)?;
    }
    std::fs::remove_dir(dir)?;
    if let Some(parent) = dir.parent() {
        crate::durable::sync_dir(parent).map_err(|e| e.source)?;
    }
    Ok(())
}

/// An id item: 8 bytes, little-endian.
fn decode_id(key: &StateKey, value: &[u8]) -> Result<u64, crate::state::StateError> {
    let bytes: [u8; 8] = value
        .try_into()
        .map_err(|_| crate::state::StateError::Corrupt {
            key: key.to_string(),
            message: format!("the batch id is {} bytes, not 8", value.len()),
        })?;
    Ok(u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests;
