//! `sync`: one pass of the commit protocol for one pipeline.
//!
//! The steps, in this order (see `docs/commit-protocol.md` for the invariant each keeps):
//!
//! 1. **Lease**: take the pipeline's writer lease (a lock on its state directory) and a
//!    fencing token; every state write of the pass is fenced with it.
//! 2. **Recover**: open the WAL (a torn tail is truncated, corruption inside committed data
//!    stops the pass) and restore the source position from the newest committed batch: the
//!    WAL record carries the checkpoint the batch reached, so a crash between the WAL commit
//!    and the position update loses nothing and reads nothing twice.
//! 3. **Deliver** outstanding batches (with a destination; without one the WAL is the dataset).
//! 4. **Read** a batch from the source, from the restored position.
//! 5. **Type** it: infer the batch's shape, evolve the saved schema (saved again when it
//!    changed), build one Arrow record batch per namespace; values that fit nowhere become
//!    deadletters.
//! 6. **Commit** it to the WAL, with the source checkpoint after it (fsync of file and dir).
//! 7. **Record** the position in the state store.
//! 8. **Write** to the destination and **reclaim** acknowledged WAL data (with a destination).
//!
//! Reading (4) runs on its own thread, a couple of batches ahead, and types a batch with the
//! schema as it is while the calling thread is busy (see `typing.rs`); steps 5-7 run in
//! order on the calling thread. Deliveries during the read loop (8) run on a delivery
//! thread; their acknowledgements and the reclaim run on the calling thread. A stop request
//! (SIGINT/SIGTERM) and the [`SyncOptions::deadline`] are honoured between batches: the batch
//! being committed is finished, nothing is half-written.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::ConfigError;
use crate::config::connectors::DeadletterConnector;
use crate::config::validate::{ValidatedConfig, ValidatedPipeline, WalLocation, WalStorage};
use crate::schema::{PipelineSchema, SchemaError, SchemaStore};
use crate::state::{Condition, StateKey, StateStore, keys};
use crate::wal::{BatchPart, DiskWal, Wal, WalOptions};

use super::delivery::Delivery;
use super::discover::{schema_store, transform_options};
use super::events::{Event, Observer};
use super::held::Held;
use super::replay::{REPLAYED_NAMESPACE, ReplayPlan, replay_unsupported, replayed_batch};
use super::reset::{Known, check_continues, check_tables};
use super::schema_save::{Fenced, save_schema};
use super::source::{open_source_unparsed_at, read_ahead_with};
use super::typing::{Typing, infer_and_type};
use super::{DeadletterLog, PipelineError};

/// Options of one pass.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// Set by a signal handler: stop reading after the batch being committed.
    pub stop: Arc<AtomicBool>,
    /// How long a second writer waits for the lease.
    pub lease_wait: Duration,
    /// Minimum time between two `SyncStatus` events.
    pub progress_interval: Duration,
    /// WAL segment size target.
    pub wal: WalOptions,
    /// Replay the files of the pipeline's deadletter sink (`File` or `S3`) instead of reading
    /// its source (`skipprd deadletters replay`): each file's records go through typing, the
    /// WAL and the destination like any others, and the file moves to `replayed/`.
    pub replay: bool,
    /// The AWS handle for the AWS backends (built once per process; loaded from the
    /// environment on first need when `None`).
    pub aws: Option<crate::aws::Aws>,
    /// When reading must stop (already less the margin the caller needs to finish: the batch
    /// being committed and the delivery after it), checked between batches as `stop` is; the
    /// report then says [`SyncReport::stopped_for_deadline`]. `None`: no deadline. A Lambda
    /// invocation sets it from its own deadline.
    pub deadline: Option<Instant>,
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            stop: Arc::new(AtomicBool::new(false)),
            lease_wait: crate::state::DEFAULT_LEASE_WAIT,
            progress_interval: Duration::from_millis(500),
            wal: WalOptions::default(),
            replay: false,
            aws: None,
            deadline: None,
        }
    }
}

/// What one pass did: the `sync_complete` event's fields, the Lambda function's summary and
/// output (field names are stable: scripts and alarms depend on them).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SyncReport {
    /// Rows committed to the WAL.
    pub rows: u64,
    /// The same as `rows`, under the name the real product's scripts read.
    pub total_rows: u64,
    /// Namespaces (tables) that got rows in this pass.
    pub namespaces_synced: u64,
    /// Wall time of the pass in milliseconds (the real product's name; `seconds` too).
    pub elapsed_ms: u64,
    /// Batches committed.
    pub batches: u64,
    /// Input bytes read.
    pub bytes: u64,
    /// Records rejected.
    pub deadletters: u64,
    /// Batches written to the destination.
    pub delivered: u64,
    /// Committed batches not yet delivered.
    pub pending: u64,
    /// Files skipped because they could not be read (tried again next pass).
    pub files_failed: u64,
    /// Wall time of the pass, in seconds (to the millisecond).
    pub seconds: f64,
    /// Whether the pass stopped reading early, on request or at the deadline.
    pub stopped: bool,
    /// Whether it stopped because [`SyncOptions::deadline`] was reached (the next pass
    /// continues).
    pub stopped_for_deadline: bool,
    /// AWS requests the pass sent, per service (`s3`, `dynamodb`, `glue`, `athena`); empty
    /// (and left out of the JSON) without AWS backends.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub aws_requests: BTreeMap<String, u64>,
    /// Requests an HttpClient source sent for the pages that gave records, retries included
    /// (left out of the JSON when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub source_requests: u64,
    /// Of those, the retries (after a 429, a 5xx, a timeout or a broken connection).
    #[serde(skip_serializing_if = "is_zero")]
    pub source_retries: u64,
    /// The namespaces behind [`SyncReport::namespaces_synced`].
    #[serde(skip)]
    pub namespaces: BTreeSet<String>,
}

/// Run passes over `pipelines`, as `skipprd sync` and the Python `Session.sync()` do. With
/// `config.settings.reset_offsets` (`RESET_OFFSETS=true`) each pipeline is reset once first;
/// with `config.settings.reset_metadata` (`RESET_METADATA=true`) its schema is discovered again.
/// Each pipeline gets a pass when it is due (every `sync_frequency`); with `once`, one pass
/// each and then return. Until [`SyncOptions::stop`] is set otherwise: a stop request ends the
/// pass in hand after the batch being committed, and no new pass starts.
///
/// A pass that fails is given to `on_error` (to be reported) and the others go on; the first
/// such error is returned at the end, wrapped in [`PipelineError::Reported`]. A config error
/// returns at once. Returns each pass's report, in order.
pub fn run_passes(
    config: &ValidatedConfig,
    pipelines: &[&ValidatedPipeline],
    options: &SyncOptions,
    once: bool,
    observer: &mut dyn Observer,
    on_error: &mut dyn FnMut(&ValidatedPipeline, &PipelineError),
) -> Result<Vec<(String, SyncReport)>, PipelineError> {
    if config.settings.reset_offsets {
        // RESET_OFFSETS=true: each pipeline starts over once, before its first pass.
        for pipeline in pipelines {
            let reset = super::ResetOptions {
                confirm: true,
                ..super::ResetOptions::default()
            };
            super::reset(config, pipeline, &reset, observer)?;
        }
    }
    if config.settings.reset_metadata {
        // RESET_METADATA=true: each pipeline's saved schema is read again from its source
        // once, before its first pass (merged, as `discover` always does: batches in the WAL
        // and the tables use what is saved, so nothing is dropped; `reset` starts over).
        for pipeline in pipelines {
            let discover = super::DiscoverOptions {
                limit: None,
                progress_interval: options.progress_interval,
                lease_wait: options.lease_wait,
                aws: options.aws.clone(),
            };
            super::discover(config, pipeline, &discover, observer)?;
        }
    }
    let stopped = || options.stop.load(Ordering::SeqCst);
    let mut reports = Vec::new();
    let mut first_error: Option<PipelineError> = None;
    let mut next_due: Vec<Instant> = vec![Instant::now(); pipelines.len()];
    loop {
        for (i, pipeline) in pipelines.iter().enumerate() {
            if stopped() || Instant::now() < next_due[i] {
                continue;
            }
            next_due[i] = Instant::now() + pipeline.sync_frequency;
            match sync_pass(config, pipeline, options, observer) {
                Ok(report) => reports.push((pipeline.name.clone(), report)),
                Err(e) if e.is_config() => return Err(e),
                Err(e) => {
                    on_error(pipeline, &e);
                    first_error.get_or_insert(e);
                }
            }
        }
        if once || stopped() {
            break;
        }
        let wake = next_due.iter().min().copied().unwrap_or_else(Instant::now);
        while Instant::now() < wake && !stopped() {
            std::thread::sleep(
                Duration::from_millis(200).min(wake.saturating_duration_since(Instant::now())),
            );
        }
    }
    match first_error {
        // Already given to `on_error`; the error itself decides the exit code.
        Some(e) => Err(PipelineError::Reported(Box::new(e))),
        None => Ok(reports),
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Minimum free bytes on the data dir's file system before reading pauses.
const DISK_MIN_FREE: u64 = 5_000_000_000;

/// Run one pass on `pipeline`.
pub fn sync_pass(
    config: &ValidatedConfig,
    pipeline: &ValidatedPipeline,
    options: &SyncOptions,
    observer: &mut dyn Observer,
) -> Result<SyncReport, PipelineError> {
    let started = Instant::now();
    let name = pipeline.name.clone();
    let settings = &config.settings;
    if options.replay
        && pipeline.deadletter_sink.as_ref().is_some_and(|d| {
            !matches!(
                d.connector,
                DeadletterConnector::File(_) | DeadletterConnector::S3(_)
            )
        })
    {
        // Before the lease: nothing is read or delivered.
        return Err(replay_unsupported(pipeline).into());
    }
    if options.replay && pipeline.write.replaces_reads() {
        // Replayed records are no read of the source: they would replace the table alone.
        return Err(ConfigError::UnsupportedSetting {
            setting: format!("pipelines.{name}.write_policy"),
            value: "replace_table / replace_partition".to_owned(),
            note: Some("`deadletters replay` adds records to tables, and this pipeline's tables are replaced by whole reads of its source: fix the source's records and let the next read carry them".to_owned()),
        }
        .into());
    }
    let state_err = |source| PipelineError::State {
        pipeline: name.clone(),
        source,
    };
    let wal_err = |source| PipelineError::Wal {
        pipeline: name.clone(),
        source,
    };
    let schema_err = |source: SchemaError| PipelineError::Schema {
        pipeline: name.clone(),
        source,
    };

    // The AWS backends share one handle (built once per process when the caller passes one),
    // whose request counter reports what the pass cost.
    let aws = super::held::pipeline_aws(options.aws.as_ref(), pipeline)?;
    let requests_before = aws.as_ref().map(crate::aws::Aws::requests);

    // 1. Lease (the store is opened under it).
    let held = Held::take_with(
        settings,
        pipeline,
        options.lease_wait,
        aws.as_ref(),
        observer,
    )?;
    let (store, partition, state_dir) = (&held.store, &held.partition, &held.state_dir);
    let fence = Some(held.fence());

    // 2. Recover.
    let position_key = StateKey::new(partition.as_str(), keys::POSITION);
    let known = Known::read(&**store, partition, &name)?;
    let (mut wal, recovery) = open_wal(
        WalPlace {
            pipeline: &name,
            location: &pipeline.wal,
            store,
            partition,
            fence,
            recorded_through: known.position.as_ref().map_or(0, |(batch, _)| *batch),
            floor: known.floor(),
            aws: aws.as_ref(),
        },
        &crate::wal::WalOptions {
            segment_target_bytes: settings
                .wal_bytes_per_file
                .unwrap_or(options.wal.segment_target_bytes),
            compression: pipeline.wal_compression,
            ..options.wal.clone()
        },
    )?;
    for warning in &recovery.warnings {
        tracing::warn!(pipeline = %name, "{warning}");
    }
    // A WAL numbering below ids the state store holds was lost or replaced: refuse before
    // anything is read, delivered or reclaimed (see `reset`).
    check_continues(&known, wal.next_id().0, &name)?;
    let recorded = known.position.clone();
    // The recorded position names the newest WAL batch it follows. When that is the WAL's
    // newest committed batch, the record is current (it may even be newer than the WAL's
    // position: a batch whose every record was rejected moves the position without a WAL
    // batch). Otherwise a crash came between a WAL commit and the position update, and the
    // WAL, which carries the position each batch reached, is the authority.
    let newest = wal.next_id().0.saturating_sub(1);
    let position: Option<Vec<u8>> = match recorded {
        Some((batch, bytes)) if batch == newest => Some(bytes),
        _ => match wal.last_position() {
            Some(p) => {
                put_position(store, &position_key, newest, p, fence).map_err(state_err)?;
                Some(p.to_vec())
            }
            None => None,
        },
    };
    observer.event(&Event::SyncStart {
        pipeline: name.clone(),
        source: pipeline.source.name.clone(),
        committed_batches: wal.batches().len() as u64,
        recovered_truncated_bytes: recovery.truncated_bytes,
    });

    let schemas = schema_store(settings, pipeline, aws.as_ref())?;
    let mut schema = match schemas.load() {
        Ok(s) => s,
        Err(SchemaError::NotFound { .. }) => PipelineSchema::empty(&name, &settings.workspace),
        Err(e) => return Err(schema_err(e)),
    };
    let version_key = StateKey::new(partition.as_str(), keys::SCHEMA_VERSION);
    let mut schema_version = match store.get(&version_key).map_err(state_err)? {
        Some(item) => String::from_utf8_lossy(&item.value)
            .parse::<u32>()
            .map_err(|_| {
                state_err(crate::state::StateError::Corrupt {
                    key: version_key.to_string(),
                    message: "the schema version is not a number".to_owned(),
                })
            })?,
        None => 1,
    };

    // 3. Deliver outstanding batches (without a destination the WAL is the dataset).
    let sink =
        crate::sinks::open_any(pipeline, aws.as_ref()).map_err(|source| PipelineError::Sink {
            pipeline: name.clone(),
            source: Box::new(source),
        })?;
    if known.is_empty()
        && let Some(sink) = &sink
    {
        // The state store knows no batch: the tables must not know one above the WAL either.
        check_tables(sink.as_ref(), wal.next_id().0, &name)?;
    }
    let deadletter_sink = match &pipeline.deadletter_sink {
        Some(dl) => crate::sinks::deadletter::DeadletterSink::open(
            dl,
            &name,
            &config.base_dir,
            aws.as_ref(),
        )
        .map_err(|source| PipelineError::Sink {
            pipeline: name.clone(),
            source: Box::new(source),
        })?,
        None => None,
    };
    let mut delivery = Delivery::start(
        sink.as_deref(),
        deadletter_sink.as_ref(),
        store,
        partition,
        fence,
        &name,
        settings.deliver_threshold_bytes,
    )?
    .map(|d| {
        d.with_max_delay(settings.wal_max_delay)
            .with_whole_reads(pipeline.write.replaces_reads())
    });
    let mut report = SyncReport::default();
    if let Some(d) = delivery.as_mut() {
        d.deliver(&mut *wal, &schema, &mut report)?;
    }

    // 4-7. Read, type, commit, record.
    let (source, replay) = if options.replay {
        let plan = ReplayPlan::new(
            pipeline,
            settings,
            &config.base_dir,
            deadletter_sink.as_ref(),
            store,
            partition,
            &*wal,
            position.as_deref(),
        )?;
        let source: Box<dyn crate::sources::Source> = Box::new(
            crate::sources::replay::ReplaySource::new(plan.sink.target(), plan.files.clone()),
        );
        (source, Some(plan))
    } else {
        let source = open_source_unparsed_at(
            pipeline,
            settings,
            &config.base_dir,
            position.as_deref(),
            aws.as_ref(),
        )?;
        (source, None)
    };
    let mut replayed_now: Vec<String> = Vec::new();
    let typing = Typing::new(&schema, transform_options(pipeline));
    let transform = typing.transform();
    let mut last_status = Instant::now();
    let mut dl_log = DeadletterLog::collecting(&name);
    let disk_dir = state_dir.clone();
    // Typing's first try (with the schema as it is) runs on the reader thread while this one
    // is busy, and here when it is not (see `typing`).
    let mut reader_typer = crate::schema::JsonLineTyper::default();
    let mut typer = crate::schema::JsonLineTyper::default();
    let prepare = |batch| typing.prepare(batch, &mut reader_typer);
    let wal_reader = wal.reader();
    let read_result = std::thread::scope(|scope| {
        // Deliveries during the pass run on their own thread, beside reading and committing.
        if let Some(d) = delivery.as_mut() {
            d.start_worker(scope, wal_reader.clone());
        }
        // A source that takes long to fill a batch ends it early on a stop request or at the
        // deadline, so the batch in hand is committed soon and no more is read.
        let mut source = source;
        source.stop_on(crate::sources::StopRequest::new(
            Arc::clone(&options.stop),
            options.deadline,
        ));
        let read = read_ahead_with(source, 2, prepare, |steps| -> Result<(), PipelineError> {
            for step in steps {
                let (prepared, progress, checkpoint) = match step {
                    Ok(step) => step,
                    // One unreadable file must not block the others: it is reported, stays
                    // unfinished in the checkpoint (so the next pass tries it again), and reading
                    // goes on with the next file.
                    Err(e) if e.affects_one_file() => {
                        tracing::error!(pipeline = %name, error = %e, "Skipped a file that could not be read; the next pass tries it again.");
                        report.files_failed += 1;
                        continue;
                    }
                    Err(source) => {
                        return Err(PipelineError::Source {
                            pipeline: name.clone(),
                            source,
                        });
                    }
                };
                let (mut batch, typed) = typing.settle(prepared, &mut typer);
                // A replayed file is named in the batch that holds its records.
                let replayed_files: Vec<String> = match &replay {
                    Some(_) => {
                        let mut names: Vec<String> = batch
                            .records
                            .iter()
                            .map(|r| &*r.position.uri)
                            .chain(batch.deadletters.iter().map(|d| d.source_uri.as_str()))
                            .map(crate::sources::replay::ReplaySource::file_name)
                            .collect();
                        names.sort();
                        names.dedup();
                        names
                    }
                    None => Vec::new(),
                };
                report.bytes += batch.bytes_read;
                report.source_requests = progress.requests;
                report.source_retries = progress.retries;
                // Type. Fast path: the batch fits the schema as it is (no new key or namespace, no
                // value that needs a new column), so it was typed without inference (see
                // `typing`). Otherwise: infer the batch, evolve the schema, build per-namespace
                // Arrow batches.
                // The batch's deadletters (lines that are not JSON objects among them, which
                // inference finds) come first, then the records that could not be typed.
                let mut untypeable = Vec::new();
                let builders = match typed {
                    Some(builders) => builders,
                    None => {
                        let inferred = infer_and_type(
                            &mut batch,
                            &mut schema,
                            transform,
                            &mut typer,
                            (&name, &settings.workspace),
                            &mut |dl| untypeable.push(dl),
                        )
                        .map_err(schema_err)?;
                        typing.publish(&schema);
                        if !inferred.changes.is_empty() && !settings.schema_auto_approve {
                            // Before the commit: the batch and its position wait for the
                            // approval (`discover` or `metadata apply`).
                            return Err(PipelineError::SchemaNotApproved {
                                pipeline: name.clone(),
                                changes: inferred.changes.iter().map(ToString::to_string).collect(),
                            });
                        }
                        if !inferred.changes.is_empty() {
                            // Fenced, and merged into what is saved: never narrowing it.
                            let lease = Fenced {
                                store: &**store,
                                partition,
                                fence,
                            };
                            let saved = save_schema(&schemas, &schema, Some(lease), &name)?;
                            if saved.schema != schema {
                                schema = saved.schema;
                                typing.publish(&schema);
                            }
                            if let Some(version) = saved.version {
                                schema_version = version;
                            }
                            failpoint(failpoint::AFTER_SCHEMA_SAVE).map_err(wal_err)?;
                            observer.event(&Event::SchemaEvolved {
                                pipeline: name.clone(),
                                version: schema_version,
                                changes: inferred.changes.iter().map(ToString::to_string).collect(),
                            });
                        }
                        inferred.builders
                    }
                };
                for dl in batch.deadletters.iter().chain(&untypeable) {
                    report.deadletters += 1;
                    dl_log.log(dl);
                }
                let mut parts = Vec::with_capacity(builders.len());
                for (namespace, mut builder) in builders {
                    if builder.is_empty() {
                        continue;
                    }
                    let rows = builder.len() as u64;
                    let batch = builder.finish().map_err(schema_err)?;
                    report.rows += rows;
                    if !report.namespaces.contains(&namespace) {
                        report.namespaces.insert(namespace.clone());
                    }
                    parts.push(BatchPart {
                        namespace,
                        schema_version,
                        batch,
                    });
                }
                // The batch's rejected records are committed with it, so they survive a crash
                // exactly as its rows do.
                let rejected = dl_log.take();
                if !rejected.is_empty() {
                    let micros = chrono::Utc::now().timestamp_micros();
                    let batch =
                        crate::deadletter::to_record_batch(&rejected, micros).map_err(|e| {
                            schema_err(SchemaError::Arrow {
                                namespace: crate::deadletter::WAL_NAMESPACE.to_owned(),
                                message: e.to_string(),
                            })
                        })?;
                    parts.push(BatchPart {
                        namespace: crate::deadletter::WAL_NAMESPACE.to_owned(),
                        schema_version: 1,
                        batch,
                    });
                }
                if !replayed_files.is_empty() {
                    parts.push(BatchPart {
                        namespace: REPLAYED_NAMESPACE.to_owned(),
                        schema_version: 1,
                        batch: replayed_batch(&replayed_files).map_err(|e| {
                            schema_err(SchemaError::Arrow {
                                namespace: REPLAYED_NAMESPACE.to_owned(),
                                message: e.to_string(),
                            })
                        })?,
                    });
                }
                // A replay leaves the source where it was.
                let checkpoint = match &replay {
                    Some(plan) => plan.position.clone(),
                    None => checkpoint,
                };
                // Commit, then record the position. A batch with neither rows nor rejected
                // records has nothing to commit: only the position moves.
                failpoint(failpoint::BEFORE_WAL_COMMIT).map_err(wal_err)?;
                let batch_id = if parts.is_empty() {
                    wal.next_id().0.saturating_sub(1)
                } else {
                    let meta = wal.append(&checkpoint, &parts).map_err(wal_err)?;
                    report.batches += 1;
                    replayed_now.extend(replayed_files);
                    meta.id.0
                };
                failpoint(failpoint::AFTER_WAL_COMMIT).map_err(wal_err)?;
                put_position(store, &position_key, batch_id, &checkpoint, fence)
                    .map_err(state_err)?;
                failpoint(failpoint::AFTER_POSITION).map_err(wal_err)?;
                // 8. Write to the destination once enough is outstanding (on the worker; and at
                // the end of the pass).
                if let Some(d) = delivery.as_mut() {
                    d.poll(&mut *wal, &schema, &mut report)?;
                }
                if last_status.elapsed() >= options.progress_interval {
                    last_status = Instant::now();
                    observer.event(&Event::SyncStatus {
                        pipeline: name.clone(),
                        rows: report.rows,
                        batches: report.batches,
                        bytes: report.bytes,
                        bytes_total: progress.bytes_total,
                        deadletters: report.deadletters,
                    });
                }
                if settings.wal_storage == WalStorage::Disk {
                    if pipeline.write.replaces_reads() {
                        // Nothing is delivered before the read ends: waiting frees no space.
                        refuse_full_disk(&disk_dir, &name)?;
                    } else {
                        wait_for_disk(&disk_dir, &name, &options.stop, options.deadline);
                    }
                }
                if options.stop.load(Ordering::SeqCst) {
                    report.stopped = true;
                    return Ok(());
                }
                if reached(options.deadline) {
                    tracing::info!(pipeline = %name, "The deadline is near: reading stops after the batch in hand.");
                    report.stopped = true;
                    report.stopped_for_deadline = true;
                    return Ok(());
                }
            }
            // The source may have ended reading because of the request, not at its end: then
            // this read did not end (nothing marks it whole).
            if options.stop.load(Ordering::SeqCst) {
                report.stopped = true;
            } else if reached(options.deadline) {
                report.stopped = true;
                report.stopped_for_deadline = true;
            }
            Ok(())
        });
        // Requests made after the last batch (the empty page that ended a pagination) count.
        let (result, ended) = read;
        report.source_requests = report.source_requests.max(ended.requests);
        report.source_retries = report.source_retries.max(ended.retries);
        // The worker finishes the job in hand (whose outcome is taken below, or redone by the
        // next pass) and ends when its queue closes.
        let finished = match (&result, delivery.as_mut()) {
            (Ok(()), Some(d)) => d.wait_for_worker(&mut *wal, &mut report),
            _ => Ok(()),
        };
        if let Some(d) = delivery.as_mut() {
            d.stop_worker();
        }
        result.and(finished)
    });
    read_result?;
    if let Some(plan) = &replay {
        plan.set_aside(&replayed_now);
    }
    // A read that ended (not stopped, not failed, no file skipped; a replay is no read of
    // the source) is marked, so a destination replacing tables by whole reads gets its
    // batches together. The marker keeps the recorded position (the newest checkpoint).
    if replay.is_none()
        && !report.stopped
        && report.files_failed == 0
        && pipeline.write.replaces_reads()
        && let Some(d) = delivery.as_ref()
        && d.unmarked(&*wal)
    {
        failpoint(failpoint::BEFORE_READ_END).map_err(wal_err)?;
        let checkpoint = match store.get(&position_key).map_err(state_err)? {
            Some(item) => Some(
                decode_position(&position_key, &item.value)
                    .map_err(state_err)?
                    .1,
            ),
            None => wal.last_position().map(<[u8]>::to_vec),
        };
        if let Some(checkpoint) = checkpoint {
            let meta = wal
                .append(&checkpoint, &[BatchPart::read_end()])
                .map_err(wal_err)?;
            failpoint(failpoint::AFTER_READ_END).map_err(wal_err)?;
            put_position(store, &position_key, meta.id.0, &checkpoint, fence).map_err(state_err)?;
        }
    }
    if let Some(d) = delivery.as_mut() {
        d.deliver(&mut *wal, &schema, &mut report)?;
        report.pending = d.outstanding(&*wal).len() as u64;
    }
    drop(delivery);
    drop(sink);
    // The store and the WAL go before the lease: a writer waiting for the lock must find them
    // closed (redb admits one process at a time).
    drop(wal);
    drop(held);
    if let (Some(aws), Some(before)) = (&aws, &requests_before) {
        report.aws_requests = requests_since(aws, before);
    }
    let elapsed = started.elapsed();
    report.seconds = (elapsed.as_secs_f64() * 1000.0).round() / 1000.0;
    report.elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    report.total_rows = report.rows;
    report.namespaces_synced = report.namespaces.len() as u64;
    observer.event(&Event::SyncComplete {
        pipeline: name.clone(),
        report: report.clone(),
    });
    Ok(report)
}

/// Requests per service since `before`.
fn requests_since(aws: &crate::aws::Aws, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    aws.requests()
        .into_iter()
        .map(|(service, n)| {
            let was = before.get(&service).copied().unwrap_or(0);
            (service, n - was)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// What [`open_wal`] needs to know.
pub(super) struct WalPlace<'a> {
    pub(super) pipeline: &'a str,
    /// Where the WAL lives.
    pub(super) location: &'a WalLocation,
    pub(super) store: &'a dyn StateStore,
    pub(super) partition: &'a str,
    pub(super) fence: Option<crate::state::Fence>,
    /// The newest batch id whose position the state store recorded.
    pub(super) recorded_through: u64,
    /// The id floor of the last reset (`wal#floor`, 0 if none): a fresh WAL numbers above it.
    pub(super) floor: u64,
    /// The pass's AWS handle, when a backend needs one.
    pub(super) aws: Option<&'a crate::aws::Aws>,
}

/// Open the pipeline's WAL where validation put it: segment files under the state directory,
/// or objects under `wal/{tenant}/{workspace}/{pipeline}/` in the WAL bucket.
pub(super) fn open_wal<'a>(
    place: WalPlace<'a>,
    options: &WalOptions,
) -> Result<(Box<dyn Wal + 'a>, crate::wal::Recovery), PipelineError> {
    let wal_err = |source| PipelineError::Wal {
        pipeline: place.pipeline.to_owned(),
        source,
    };
    match place.location {
        WalLocation::Disk { dir } => {
            let (wal, recovery) =
                DiskWal::open_above(dir, options.clone(), place.floor).map_err(wal_err)?;
            Ok((Box::new(wal), recovery))
        }
        WalLocation::S3 { bucket, prefix } => {
            let aws = place.aws.ok_or_else(|| PipelineError::Aws {
                pipeline: place.pipeline.to_owned(),
                source: crate::aws::AwsError::NotLoaded {
                    purpose: "the S3 WAL",
                },
            })?;
            let (wal, recovery) = crate::wal::s3::S3Wal::open(crate::wal::s3::S3WalConfig {
                aws: aws.clone(),
                bucket: bucket.clone(),
                prefix: prefix.clone(),
                store: place.store,
                partition: place.partition.to_owned(),
                fence: place.fence,
                recorded_through: place.recorded_through,
                floor: place.floor,
            })
            .map_err(wal_err)?;
            Ok((Box::new(wal), recovery))
        }
    }
}

/// Names of the failpoints of the pass.
pub use crate::failpoint::sync as failpoint;

/// Fire the failpoint `name` (aborts the process with the `failpoints` feature and
/// `SKIPPR_FAILPOINT=name`; in unit tests an armed hook makes it an error).
pub(super) fn failpoint(name: &'static str) -> Result<(), crate::wal::WalError> {
    if crate::failpoint::check(name) {
        return Err(crate::wal::WalError::Failpoint { name });
    }
    Ok(())
}

fn put_position(
    store: &dyn StateStore,
    key: &StateKey,
    batch: u64,
    checkpoint: &[u8],
    fence: Option<crate::state::Fence>,
) -> Result<u64, crate::state::StateError> {
    let mut value = Vec::with_capacity(8 + checkpoint.len());
    value.extend_from_slice(&batch.to_le_bytes());
    value.extend_from_slice(checkpoint);
    store.put(key, &value, Condition::Any, fence)
}

/// The position item: the newest WAL batch id it follows (u64 LE), then the source checkpoint.
pub(super) fn decode_position(
    key: &StateKey,
    value: &[u8],
) -> Result<(u64, Vec<u8>), crate::state::StateError> {
    let (id, checkpoint) =
        value
            .split_first_chunk::<8>()
            .ok_or_else(|| crate::state::StateError::Corrupt {
                key: key.to_string(),
                message: format!("{} bytes is shorter than the 8-byte batch id", value.len()),
            })?;
    Ok((u64::from_le_bytes(*id), checkpoint.to_vec()))
}

/// The disk guard: pause while the data dir's file system has under 5 GB free or is 90%
/// full; resume at 80%.
fn wait_for_disk(
    dir: &std::path::Path,
    pipeline: &str,
    stop: &AtomicBool,
    deadline: Option<Instant>,
) {
    let Some((available, _)) = disk_guard_trips(dir) else {
        return;
    };
    let used =
        |s: &fs4::FsStats| disk_used_fraction(s.total_space(), s.free_space(), s.available_space());
    tracing::warn!(
        pipeline,
        available,
        "Disk nearly full: reading paused until usage drops to 80%."
    );
    while !stop.load(Ordering::SeqCst) && !reached(deadline) {
        std::thread::sleep(Duration::from_secs(5));
        match fs4::statvfs(dir) {
            Ok(s) if s.available_space() >= DISK_MIN_FREE && used(&s) <= 0.8 => break,
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    tracing::info!(pipeline, "Disk space recovered: reading resumes.");
}

/// The disk guard of a pipeline that delivers whole reads: a read that fills the disk cannot
/// wait for a delivery to free it (none comes before the read ends), so the pass fails,
/// saying so; what it committed stays and the next pass continues the read.
fn refuse_full_disk(dir: &std::path::Path, pipeline: &str) -> Result<(), PipelineError> {
    let Some((available, used)) = disk_guard_trips(dir) else {
        return Ok(());
    };
    Err(PipelineError::Io {
        pipeline: pipeline.to_owned(),
        path: dir.to_path_buf(),
        message: format!(
            "the disk holding the WAL is nearly full ({available} bytes available, {:.0}% used), and this pipeline replaces tables by whole reads, delivered only when a read ends: free space (or read less per pass), then sync again",
            used * 100.0
        ),
    })
}

/// The bytes available and the used fraction of `dir`'s file system when the disk guard
/// trips there ([`disk_guard_pauses`]); `None` when it does not (or cannot be read).
fn disk_guard_trips(dir: &std::path::Path) -> Option<(u64, f64)> {
    let stats = fs4::statvfs(dir).ok()?;
    let used = disk_used_fraction(
        stats.total_space(),
        stats.free_space(),
        stats.available_space(),
    );
    disk_guard_pauses(stats.available_space(), used).then_some((stats.available_space(), used))
}

/// Whether `deadline` has come (never without one).
fn reached(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|deadline| Instant::now() >= deadline)
}

/// Whether the disk guard pauses reading: under 5 GB available, or 90 % used.
pub(crate) fn disk_guard_pauses(available: u64, used_fraction: f64) -> bool {
    available < DISK_MIN_FREE || used_fraction >= 0.9
}

/// How full a file system is, as `df` reports it: used blocks over the blocks an ordinary
/// user could have (used + available), so blocks reserved for root do not count as used.
pub(crate) fn disk_used_fraction(total: u64, free: u64, available: u64) -> f64 {
    let used = total.saturating_sub(free) as f64;
    let usable = used + available as f64;
    if usable <= 0.0 { 0.0 } else { used / usable }
}

#[cfg(test)]
mod tests;
