//! Step 8 of a pass: deliver committed WAL batches to the destination and the deadletter
//! sink, acknowledge them in the state store, and reclaim them from the WAL.
//!
//! The order, and what a crash between any two steps leaves for the next pass to repair, is
//! in `docs/commit-protocol.md` (step 8). During the read loop deliveries run on a delivery
//! thread ([`Delivery::start_worker`], [`Delivery::poll`]); acknowledgements and the reclaim
//! always run on the pass's thread. Before each table commit a [`CommitGuard`] proves the
//! writer still holds its lease.

use std::sync::Arc;
use std::time::Instant;

use crate::schema::PipelineSchema;
use crate::sinks::Sink;
use crate::state::{Condition, StateKey, StateStore, keys};
use crate::wal::{BatchId, BatchPart, PartKind, Wal, WalReader};

use super::PipelineError;
use super::replay::replayed_names;
use super::sync::{SyncReport, failpoint};

/// Step 8 of the pass: deliver committed batches, acknowledge them, reclaim them.
///
/// Two destinations may take a batch: the data sink (its rows) and the deadletter sink (its
/// rejected records). Each has its own acknowledgement, so adding one later never skips
/// batches for it. The WAL is reclaimed only with a data sink (without one the WAL is the
/// dataset), through the lower of the two acknowledgements.
pub(super) struct Delivery<'a> {
    data: Option<Acked<&'a dyn Sink>>,
    deadletters: Option<Acked<&'a crate::sinks::deadletter::DeadletterSink>>,
    store: &'a dyn StateStore,
    fence: Option<crate::state::Fence>,
    pipeline: &'a str,
    /// The delivery thread of the read loop, when running.
    worker: Option<Worker>,
    /// Outstanding WAL bytes that start a delivery during the read loop.
    threshold: u64,
    /// Outstanding batches are also handed over once this long passed since the last
    /// handover (or the start) (`WAL_MAX_DELAY_SECONDS`); `None`: by bytes only.
    max_delay: Option<std::time::Duration>,
    /// When the read loop last handed batches over, or started.
    last_handover: Instant,
    /// The pipeline's state partition.
    partition: String,
    /// Deliver whole reads only (a table replaced by each read): a job ends at the first
    /// read-end marker after the acknowledgement, and batches after the last marker wait.
    whole_reads: bool,
}

/// Batches to deliver, with the acknowledgements and schema they were cut at.
struct Job {
    batches: Vec<crate::wal::BatchMeta>,
    data_acked: u64,
    dead_acked: u64,
    schema: PipelineSchema,
}

/// What a delivery job did.
struct Outcome {
    last: BatchId,
    batches: usize,
    delivered: crate::sinks::Delivered,
    dead_files: u64,
    started: Instant,
}

/// The queue to the delivery thread and its answers; one job at a time.
struct Worker {
    jobs: std::sync::mpsc::Sender<Job>,
    done: std::sync::mpsc::Receiver<Result<Outcome, PipelineError>>,
    in_flight: bool,
}

/// A sink and its acknowledgement item.
struct Acked<S> {
    sink: S,
    key: StateKey,
    /// The last batch id the sink acknowledged.
    acked: u64,
}

impl<'a> Delivery<'a> {
    pub(super) fn start(
        data: Option<&'a dyn Sink>,
        deadletters: Option<&'a crate::sinks::deadletter::DeadletterSink>,
        store: &'a dyn StateStore,
        partition: &str,
        fence: Option<crate::state::Fence>,
        pipeline: &'a str,
        threshold: u64,
    ) -> Result<Option<Self>, PipelineError> {
        let state_err = |source| PipelineError::State {
            pipeline: pipeline.to_owned(),
            source,
        };
        let acked = |sort: &str| -> Result<(StateKey, u64), PipelineError> {
            let key = StateKey::new(partition, sort);
            let acked = match store.get(&key).map_err(state_err)? {
                Some(item) => decode_ack(&key, &item.value).map_err(state_err)?,
                None => 0,
            };
            Ok((key, acked))
        };
        if data.is_none() && deadletters.is_none() {
            return Ok(None);
        }
        let data = match data {
            Some(sink) => {
                let (key, acked) = acked(keys::ACK)?;
                Some(Acked { sink, key, acked })
            }
            None => None,
        };
        let deadletters = match deadletters {
            Some(sink) => {
                let (key, acked) = acked(keys::DEADLETTER_ACK)?;
                Some(Acked { sink, key, acked })
            }
            None => None,
        };
        Ok(Some(Delivery {
            data,
            deadletters,
            store,
            fence,
            pipeline,
            worker: None,
            threshold,
            max_delay: None,
            last_handover: Instant::now(),
            partition: partition.to_owned(),
            whole_reads: false,
        }))
    }

    /// Also hand outstanding batches over once `max_delay` passed since the last handover
    /// (`WAL_MAX_DELAY_SECONDS`), however few bytes they take.
    pub(super) fn with_max_delay(mut self, max_delay: Option<std::time::Duration>) -> Self {
        self.max_delay = max_delay;
        self
    }

    /// Deliver whole reads only (`replace_table`, `replace_partition`): each job is one read,
    /// its batches through the read-end marker the pass commits when the read ended.
    pub(super) fn with_whole_reads(mut self, whole_reads: bool) -> Self {
        self.whole_reads = whole_reads;
        self
    }

    /// Whether outstanding batches follow the last read-end marker (a read the pass must mark
    /// when it ended).
    pub(super) fn unmarked(&self, wal: &dyn Wal) -> bool {
        let acked = self.acked();
        wal.batches()
            .last()
            .is_some_and(|b| b.id.0 > acked && !b.ends_read())
    }

    /// The lowest acknowledgement of the configured sinks.
    fn acked(&self) -> u64 {
        let data = self.data.as_ref().map(|a| a.acked);
        let dead = self.deadletters.as_ref().map(|a| a.acked);
        data.into_iter().chain(dead).min().unwrap_or(0)
    }

    /// Committed batches some sink has not acknowledged.
    pub(super) fn outstanding(&self, wal: &dyn Wal) -> Vec<crate::wal::BatchMeta> {
        let acked = self.acked();
        wal.batches()
            .iter()
            .filter(|b| b.id.0 > acked)
            .cloned()
            .collect()
    }

    fn outstanding_bytes(&self, wal: &dyn Wal) -> u64 {
        let acked = self.acked();
        wal.batches()
            .iter()
            .filter(|b| b.id.0 > acked)
            .map(|b| b.bytes)
            .sum()
    }

    fn ack(&self, key: &StateKey, id: u64) -> Result<(), PipelineError> {
        self.store
            .put(key, &id.to_le_bytes(), Condition::Any, self.fence)
            .map(|_| ())
            .map_err(|source| PipelineError::State {
                pipeline: self.pipeline.to_owned(),
                source,
            })
    }

    /// Write every outstanding batch (the destinations skip or overwrite what already
    /// landed), then store the acknowledgements, then reclaim. A crash between any two steps
    /// is repaired by the next pass: see `docs/commit-protocol.md`.
    pub(super) fn deliver(
        &mut self,
        wal: &mut dyn Wal,
        schema: &PipelineSchema,
        report: &mut SyncReport,
    ) -> Result<(), PipelineError> {
        self.wait_for_worker(wal, report)?;
        let mut idle = true;
        while let Some(job) = self.job(wal, schema) {
            idle = false;
            let outcome = {
                let wal_ref: &dyn Wal = wal;
                run_job(
                    self.data.as_ref().map(|d| d.sink),
                    self.deadletters.as_ref().map(|d| d.sink),
                    &job,
                    &mut |id| wal_ref.read(id),
                    &self.commit_guard(),
                )
                .map_err(|source| PipelineError::Sink {
                    pipeline: self.pipeline.to_owned(),
                    source: Box::new(source),
                })?
            };
            self.complete(outcome, wal, report)?;
        }
        if idle {
            // A crash between the acknowledgement and the reclaim left acknowledged batches
            // in the WAL, and no later delivery may come to reclaim them: reclaim them now.
            let acked = self.acked();
            if self.data.is_some()
                && let Some(done) = wal.batches().iter().rev().find(|b| b.id.0 <= acked)
            {
                let id = done.id;
                wal.reclaim_through(id)
                    .map_err(|source| PipelineError::Wal {
                        pipeline: self.pipeline.to_owned(),
                        source,
                    })?;
            }
        }
        Ok(())
    }

    /// The outstanding batches as a job, or `None` when there are none. Delivering whole
    /// reads, the job ends at the first read-end marker (`None` before one).
    fn job(&self, wal: &dyn Wal, schema: &PipelineSchema) -> Option<Job> {
        let mut batches = self.outstanding(wal);
        if self.whole_reads {
            let end = batches.iter().position(crate::wal::BatchMeta::ends_read)?;
            batches.truncate(end + 1);
        }
        if batches.is_empty() {
            return None;
        }
        Some(Job {
            batches,
            data_acked: self.data.as_ref().map_or(0, |d| d.acked),
            dead_acked: self.deadletters.as_ref().map_or(0, |d| d.acked),
            schema: schema.clone(),
        })
    }

    /// After a job: acknowledge (deadletters, then data), then reclaim.
    fn complete(
        &mut self,
        outcome: Outcome,
        wal: &mut dyn Wal,
        report: &mut SyncReport,
    ) -> Result<(), PipelineError> {
        let pipeline = self.pipeline.to_owned();
        let wal_err = |source| PipelineError::Wal {
            pipeline: pipeline.clone(),
            source,
        };
        let last = outcome.last;
        if let Some(d) = &self.deadletters {
            self.ack(&d.key, last.0)?;
        }
        if let Some(d) = self.deadletters.as_mut() {
            d.acked = d.acked.max(last.0);
            if outcome.dead_files > 0 {
                tracing::info!(pipeline = %pipeline, files = outcome.dead_files, location = %d.sink.location(), "Delivered rejected records.");
            }
        }
        if let Some(d) = &self.data {
            failpoint(failpoint::AFTER_DELIVER).map_err(wal_err)?;
            self.ack(&d.key, last.0)?;
        }
        if let Some(d) = self.data.as_mut() {
            d.acked = last.0;
            failpoint(failpoint::AFTER_ACK).map_err(wal_err)?;
            let through = reclaimable_through(&self.deadletters, last.0);
            self.keep_replay_markers(wal, through)?;
            wal.reclaim_through(BatchId(through)).map_err(wal_err)?;
            failpoint(failpoint::AFTER_RECLAIM).map_err(wal_err)?;
            let delivered = &outcome.delivered;
            tracing::info!(
                pipeline = %pipeline,
                batches = outcome.batches,
                through = %last,
                rows = delivered.rows,
                files = delivered.files,
                commits = delivered.commits,
                skipped_parts = delivered.skipped_parts,
                seconds = outcome.started.elapsed().as_secs_f64(),
                "Delivered to the destination."
            );
        }
        report.delivered += outcome.batches as u64;
        Ok(())
    }

    /// Before the WAL forgets batches through `through`: record the deadletter files they
    /// replayed in the state store (`replayed#{file}`), so a file is never replayed twice.
    fn keep_replay_markers(&self, wal: &dyn Wal, through: u64) -> Result<(), PipelineError> {
        let pipeline = self.pipeline.to_owned();
        for meta in wal.batches().iter().filter(|b| b.id.0 <= through) {
            if !meta.parts.iter().any(|p| p.kind() == PartKind::Replayed) {
                continue;
            }
            let parts = wal.read(meta.id).map_err(|source| PipelineError::Wal {
                pipeline: pipeline.clone(),
                source,
            })?;
            for name in replayed_names(&parts) {
                let key =
                    StateKey::new(&self.partition, format!("{}{name}", keys::REPLAYED_PREFIX));
                self.store
                    .put(
                        &key,
                        meta.id.0.to_string().as_bytes(),
                        Condition::Any,
                        self.fence,
                    )
                    .map_err(|source| PipelineError::State {
                        pipeline: pipeline.clone(),
                        source,
                    })?;
            }
        }
        Ok(())
    }

    /// The lease check run before each table commit.
    fn commit_guard(&self) -> CommitGuard<'a> {
        CommitGuard {
            store: self.store,
            partition: self.partition.clone(),
            fence: self.fence,
        }
    }

    /// Start the delivery thread for the read loop (see [`Delivery::poll`]).
    pub(super) fn start_worker<'scope>(
        &mut self,
        scope: &'scope std::thread::Scope<'scope, '_>,
        reader: Arc<dyn WalReader>,
    ) where
        'a: 'scope,
    {
        let (jobs, job_rx) = std::sync::mpsc::channel::<Job>();
        let (done_tx, done) = std::sync::mpsc::channel();
        let data = self.data.as_ref().map(|d| d.sink);
        let dead = self.deadletters.as_ref().map(|d| d.sink);
        let pipeline = self.pipeline.to_owned();
        let guard = self.commit_guard();
        scope.spawn(move || {
            while let Ok(job) = job_rx.recv() {
                // The job's batches are committed and not reclaimed until it is done: read
                // them by their listing entries, without scanning the WAL.
                let mut read = |id: BatchId| match job.batches.iter().find(|b| b.id == id) {
                    Some(meta) => reader.read_committed(meta),
                    None => Err(crate::wal::WalError::NotFound { batch: id }),
                };
                let result = run_job(data, dead, &job, &mut read, &guard).map_err(|source| {
                    PipelineError::Sink {
                        pipeline: pipeline.clone(),
                        source: Box::new(source),
                    }
                });
                if done_tx.send(result).is_err() {
                    break;
                }
            }
        });
        self.worker = Some(Worker {
            jobs,
            done,
            in_flight: false,
        });
    }

    /// In the read loop: take a finished job's outcome, and hand the worker the outstanding
    /// batches once they take `DELIVER_THRESHOLD_BYTES` of WAL (many small source batches
    /// thus make one Iceberg commit and few, large data files), or once
    /// `WAL_MAX_DELAY_SECONDS` passed since the last handover.
    pub(super) fn poll(
        &mut self,
        wal: &mut dyn Wal,
        schema: &PipelineSchema,
        report: &mut SyncReport,
    ) -> Result<(), PipelineError> {
        let Some(worker) = self.worker.as_mut() else {
            return Ok(());
        };
        if worker.in_flight {
            match worker.done.try_recv() {
                Ok(outcome) => {
                    worker.in_flight = false;
                    self.complete(outcome?, wal, report)?;
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => return Ok(()),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    worker.in_flight = false;
                    return Err(self.worker_gone());
                }
            }
        }
        let overdue = self
            .max_delay
            .is_some_and(|delay| self.last_handover.elapsed() >= delay);
        if !overdue && self.outstanding_bytes(wal) < self.threshold {
            return Ok(());
        }
        let Some(job) = self.job(wal, schema) else {
            return Ok(());
        };
        let gone = self.worker_gone();
        if let Some(worker) = self.worker.as_mut() {
            worker.jobs.send(job).map_err(|_| gone)?;
            worker.in_flight = true;
            self.last_handover = Instant::now();
        }
        Ok(())
    }

    /// Wait for the job in hand, if any, and complete it.
    pub(super) fn wait_for_worker(
        &mut self,
        wal: &mut dyn Wal,
        report: &mut SyncReport,
    ) -> Result<(), PipelineError> {
        let Some(worker) = self.worker.as_mut() else {
            return Ok(());
        };
        if !worker.in_flight {
            return Ok(());
        }
        worker.in_flight = false;
        match worker.done.recv() {
            Ok(outcome) => self.complete(outcome?, wal, report),
            Err(_) => Err(self.worker_gone()),
        }
    }

    /// Close the worker's queue (it ends after the job in hand).
    pub(super) fn stop_worker(&mut self) {
        self.worker = None;
    }

    fn worker_gone(&self) -> PipelineError {
        PipelineError::Sink {
            pipeline: self.pipeline.to_owned(),
            source: Box::new(crate::sinks::SinkError::Io {
                path: std::path::PathBuf::from("delivery thread"),
                source: std::io::Error::other("the delivery thread ended unexpectedly"),
            }),
        }
    }
}

/// Proves, right before each table commit, that the writer still holds its lease: a fenced
/// write to [`keys::COMMIT_CHECK`]. Without a fence (no lease token) it checks nothing.
struct CommitGuard<'a> {
    store: &'a dyn StateStore,
    partition: String,
    fence: Option<crate::state::Fence>,
}

impl CommitGuard<'_> {
    fn check(&self, table: &str) -> Result<(), crate::sinks::SinkError> {
        if self.fence.is_none() {
            return Ok(());
        }
        let key = StateKey::new(self.partition.as_str(), keys::COMMIT_CHECK);
        self.store
            .put(&key, b"", Condition::Any, self.fence)
            .map(|_| ())
            .map_err(|source| crate::sinks::SinkError::LeaseLost {
                table: table.to_owned(),
                source: Box::new(source),
            })
    }
}

/// Deliver a job: rejected records first, then rows.
fn run_job(
    data: Option<&dyn Sink>,
    dead: Option<&crate::sinks::deadletter::DeadletterSink>,
    job: &Job,
    read: &mut dyn FnMut(BatchId) -> Result<Vec<BatchPart>, crate::wal::WalError>,
    guard: &CommitGuard<'_>,
) -> Result<Outcome, crate::sinks::SinkError> {
    let started = Instant::now();
    let last = job.batches.last().map_or(BatchId(0), |b| b.id);
    let mut dead_files = 0;
    if let Some(sink) = dead {
        let todo: Vec<_> = job
            .batches
            .iter()
            .filter(|b| b.id.0 > job.dead_acked)
            .cloned()
            .collect();
        dead_files = sink.deliver(&todo, read)?;
    }
    let mut delivered = crate::sinks::Delivered::default();
    if let Some(sink) = data {
        let todo: Vec<_> = job
            .batches
            .iter()
            .filter(|b| b.id.0 > job.data_acked)
            .cloned()
            .collect();
        delivered = sink.write(&todo, read, &job.schema, &|table| guard.check(table))?;
        check_rows(sink, &todo, &delivered)?;
    }
    Ok(Outcome {
        last,
        batches: job.batches.len(),
        delivered,
        dead_files,
        started,
    })
}

/// Refuse a delivery that did not account for every data row of `batches`: each must have
/// been written or skipped as landed before (rejected records are in the bookkeeping part,
/// not counted here). A sink that lost rows would otherwise have them acknowledged and
/// reclaimed from the WAL.
fn check_rows(
    sink: &dyn Sink,
    batches: &[crate::wal::BatchMeta],
    delivered: &crate::sinks::Delivered,
) -> Result<(), crate::sinks::SinkError> {
    let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
        return Ok(());
    };
    let expected: u64 = batches
        .iter()
        .flat_map(|b| b.parts.iter())
        .filter(|p| p.kind().is_data())
        .map(|p| p.rows)
        .sum();
    let accounted = delivered.rows.saturating_add(delivered.skipped_rows);
    if accounted == expected {
        return Ok(());
    }
    Err(crate::sinks::SinkError::RowsUnaccounted {
        target: sink.location(),
        first: first.id,
        last: last.id,
        expected,
        written: delivered.rows,
        skipped: delivered.skipped_rows,
    })
}

/// The id the WAL may be reclaimed through once the data sink acknowledged `data_acked`.
fn reclaimable_through<S>(deadletters: &Option<Acked<S>>, data_acked: u64) -> u64 {
    deadletters
        .as_ref()
        .map_or(data_acked, |d| d.acked.min(data_acked))
}

/// The acknowledged batch id: 8 bytes, little-endian.
fn decode_ack(key: &StateKey, value: &[u8]) -> Result<u64, crate::state::StateError> {
    let bytes: [u8; 8] = value
        .try_into()
        .map_err(|_| crate::state::StateError::Corrupt {
            key: key.to_string(),
            message: format!("the acknowledgement is {} bytes, not 8", value.len()),
        })?;
    Ok(u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests;
