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
//! thread; their acknowledgements and the reclaim run on the calling thread. A stop request (SIGINT/SIGTERM) is honoured between batches: the batch
//! being committed is finished, nothing is half-written.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::config::connectors::{ConnectorSet, DeadletterConnector};
use crate::config::validate::{StoreKind, ValidatedConfig, ValidatedPipeline, WalStorage};
use crate::config::{ConfigError, SourceConnector};
use crate::deadletter::Deadletter;
use crate::schema::{
    PipelineSchema, RecordBatchBuilder, SchemaError, SchemaInferrer, SchemaStore, evolve,
    namespace_for,
};
use crate::state::{Condition, StateKey, StateStore};
use crate::wal::{BatchId, BatchPart, DiskWal, Wal, WalOptions, WalReader};

use super::discover::{schema_store, transform_options};
use super::events::{Event, Observer};
use super::held::Held;
use super::source::{open_source_unparsed_at, read_ahead_with};
use super::typing::Typing;
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
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncReport {
    /// Rows committed to the WAL.
    pub rows: u64,
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
    /// Whether the pass stopped early on request.
    pub stopped: bool,
    /// Files skipped because they could not be read (tried again next pass).
    pub files_failed: u64,
    /// AWS requests the pass sent, per service (`s3`, `dynamodb`, `glue`, `athena`); empty
    /// without AWS backends.
    pub aws_requests: BTreeMap<String, u64>,
}

/// The sort key of the source position item.
pub const POSITION_SORT_KEY: &str = "position";
/// The sort key of the schema version item.
pub const SCHEMA_VERSION_SORT_KEY: &str = "schema#version";

/// The sort key of the acknowledgement item: the last WAL batch id the destination holds.
pub const ACK_SORT_KEY: &str = "ack";

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
    let aws = pass_aws(settings, pipeline, options).map_err(|source| PipelineError::Aws {
        pipeline: name.clone(),
        source,
    })?;
    let requests_before = aws.as_ref().map(crate::aws::Aws::requests);

    // 1. Lease (the store is opened under it).
    let held = Held::take_with(settings, pipeline, options.lease_wait, aws.as_ref())?;
    let (store, partition, state_dir) = (&held.store, &held.partition, &held.state_dir);
    let fence = Some(held.fence());

    // 2. Recover.
    let position_key = StateKey::new(partition.as_str(), POSITION_SORT_KEY);
    let recorded = store
        .get(&position_key)
        .map_err(state_err)?
        .map(|item| decode_position(&position_key, &item.value))
        .transpose()
        .map_err(state_err)?;
    let wal_dir = state_dir.join("wal");
    let (mut wal, recovery) = open_wal(
        WalPlace {
            settings,
            pipeline: &name,
            dir: &wal_dir,
            store,
            partition,
            fence,
            recorded_through: recorded.as_ref().map_or(0, |(batch, _)| *batch),
            aws: aws.as_ref(),
        },
        options,
    )?;
    for warning in &recovery.warnings {
        tracing::warn!(pipeline = %name, "{warning}");
    }
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
    let version_key = StateKey::new(partition.as_str(), SCHEMA_VERSION_SORT_KEY);
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
    let sink = crate::sinks::open_with_aws(pipeline, settings, &config.base_dir, aws.as_ref())
        .map_err(|source| PipelineError::Sink {
            pipeline: name.clone(),
            source: Box::new(source),
        })?;
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
        sink.as_ref(),
        deadletter_sink.as_ref(),
        store,
        partition,
        fence,
        &name,
        settings.deliver_threshold_bytes,
    )?;
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
        let result = read_ahead_with(source, 2, prepare, |steps| -> Result<(), PipelineError> {
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
                let (batch, typed) = typing.settle(prepared, &mut typer);
                // A replayed file is named in the batch that holds its records.
                let replayed_files: Vec<String> = match &replay {
                    Some(_) => {
                        let mut names: Vec<String> = batch
                            .records
                            .iter()
                            .map(|r| r.position.uri.as_str())
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
                for dl in &batch.deadletters {
                    report.deadletters += 1;
                    dl_log.log(dl);
                }
                // Type. Fast path: the batch fits the schema as it is (no new key or namespace, no
                // value that needs a new column), so it was typed without inference (see
                // `typing`). Otherwise: infer the batch, evolve the schema, build per-namespace
                // Arrow batches.
                let builders = match typed {
                    Some(builders) => builders,
                    None => {
                        // A record that breaks an inference limit (too many fields or namespaces)
                        // becomes a deadletter instead of failing every pass from here on.
                        let mut rejected = vec![false; batch.records.len()];
                        let inferrer = infer_batch(&batch.records, transform, &mut rejected)
                            .map_err(schema_err)?;
                        for (record, _) in batch.records.iter().zip(&rejected).filter(|(_, r)| **r)
                        {
                            report.deadletters += 1;
                            dl_log.log(&untypeable(
                                record,
                                "breaks an inference limit (too many fields or namespaces)",
                            ));
                        }
                        let changes =
                            evolve(&mut schema, &inferrer.finish(&name, &settings.workspace));
                        typing.publish(&schema);
                        if !changes.is_empty() {
                            schemas.save(&schema).map_err(schema_err)?;
                            failpoint(failpoint::AFTER_SCHEMA_SAVE).map_err(wal_err)?;
                            schema_version += 1;
                            store
                                .put(
                                    &version_key,
                                    schema_version.to_string().as_bytes(),
                                    Condition::Any,
                                    fence,
                                )
                                .map_err(state_err)?;
                            observer.event(&Event::SchemaEvolved {
                                pipeline: name.clone(),
                                version: schema_version,
                                changes: changes.iter().map(ToString::to_string).collect(),
                            });
                        }
                        let mut builders: BTreeMap<String, RecordBatchBuilder> = BTreeMap::new();
                        for (record, _) in batch.records.iter().zip(&rejected).filter(|(_, r)| !**r)
                        {
                            let ns = namespace_for(&record.value, transform);
                            let Some(ns_schema) = schema.namespaces.get(&ns) else {
                                report.deadletters += 1;
                                dl_log.log(&untypeable(
                                    record,
                                    &format!("namespace `{ns}` is not in the schema"),
                                ));
                                continue;
                            };
                            let builder = builders.entry(ns.clone()).or_insert_with(|| {
                                RecordBatchBuilder::new(ns_schema)
                                    .with_flatten_events(transform.flatten_events)
                                    .with_namespace(ns.clone())
                            });
                            let position = &record.position;
                            if let Err(dl) = builder.append(&record.value, || {
                                (position.uri.clone(), position.record, position.offset)
                            }) {
                                report.deadletters += 1;
                                dl_log.log(&dl);
                            }
                        }
                        builders
                    }
                };
                let mut parts = Vec::with_capacity(builders.len());
                for (namespace, mut builder) in builders {
                    if builder.is_empty() {
                        continue;
                    }
                    let rows = builder.len() as u64;
                    let batch = builder.finish().map_err(schema_err)?;
                    report.rows += rows;
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
                    wait_for_disk(&disk_dir, &name, &options.stop);
                }
                if options.stop.load(Ordering::SeqCst) {
                    report.stopped = true;
                    return Ok(());
                }
            }
            Ok(())
        });
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
    observer.event(&Event::SyncComplete {
        pipeline: name.clone(),
        rows: report.rows,
        batches: report.batches,
        bytes: report.bytes,
        deadletters: report.deadletters,
        delivered: report.delivered,
        pending: report.pending,
        files_failed: report.files_failed,
        seconds: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        aws_requests: report.aws_requests.clone(),
    });
    Ok(report)
}

/// The AWS handle of a pass whose backends need one: the caller's, or one loaded from the
/// environment.
fn pass_aws(
    settings: &crate::config::validate::Settings,
    pipeline: &ValidatedPipeline,
    options: &SyncOptions,
) -> Result<Option<crate::aws::Aws>, crate::aws::AwsError> {
    use crate::config::connectors::SinkConnector;
    let needed = settings.wal_storage == WalStorage::S3
        || matches!(settings.store, StoreKind::Dynamodb { .. })
        || settings.storage_mode == crate::config::StorageMode::S3
        || matches!(pipeline.source.connector, SourceConnector::S3(_))
        || matches!(
            pipeline.sink.as_ref().map(|s| &s.connector),
            Some(SinkConnector::AthenaIceberg(_))
        )
        || matches!(
            pipeline.deadletter_sink.as_ref().map(|d| &d.connector),
            Some(DeadletterConnector::S3(_))
        );
    match (&options.aws, needed) {
        (Some(aws), _) => Ok(Some(aws.clone())),
        (None, true) => aws_for(pipeline).map(Some),
        (None, false) => Ok(None),
    }
}

/// Load the AWS handle for a pipeline from the environment; when the environment names no
/// region, the region of the pipeline's S3 source or AthenaIceberg sink is used (their own
/// clients use their connector's region either way).
///
/// # Errors
///
/// [`crate::aws::AwsError`] when no region is known or the configuration does not load.
pub fn aws_for(pipeline: &ValidatedPipeline) -> Result<crate::aws::Aws, crate::aws::AwsError> {
    use crate::config::connectors::SinkConnector;
    let connector_region = match (
        &pipeline.source.connector,
        pipeline.sink.as_ref().map(|s| &s.connector),
    ) {
        (SourceConnector::S3(c), _) if c.region.is_some() => c.region.clone(),
        (_, Some(SinkConnector::AthenaIceberg(c))) => c.region.clone(),
        _ => None,
    };
    match (crate::aws::Aws::load(None), connector_region) {
        (Err(crate::aws::AwsError::NoRegion), Some(region)) => crate::aws::Aws::load(Some(&region)),
        (loaded, _) => loaded,
    }
}

/// The bucket and the pipeline's prefix (`wal/{tenant}/{workspace}/{pipeline}/`) of an S3 WAL.
///
/// # Errors
///
/// [`ConfigError::UnsupportedSetting`] when neither `wal_s3_bucket` nor `skippr_s3_bucket` is
/// set.
pub fn s3_wal_place(
    settings: &crate::config::validate::Settings,
    pipeline: &str,
) -> Result<(String, String), ConfigError> {
    let bucket = settings
        .wal_s3_bucket
        .clone()
        .or_else(|| settings.skippr_s3_bucket.clone())
        .ok_or_else(|| ConfigError::UnsupportedSetting {
            setting: "WAL_STORAGE".into(),
            value: "s3".into(),
            note: Some(
                "the S3 WAL needs a bucket: set skippr.wal_s3_bucket (SKIPPR_WAL_S3_BUCKET) or skippr.skippr_s3_bucket (SKIPPR_S3_BUCKET)"
                    .into(),
            ),
        })?;
    let prefix = format!(
        "wal/{}/{}/{}/",
        settings.tenant, settings.workspace, pipeline
    );
    Ok((bucket, prefix))
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
struct WalPlace<'a> {
    settings: &'a crate::config::validate::Settings,
    pipeline: &'a str,
    /// The disk WAL's directory.
    dir: &'a std::path::Path,
    store: &'a dyn StateStore,
    partition: &'a str,
    fence: Option<crate::state::Fence>,
    /// The newest batch id whose position the state store recorded.
    recorded_through: u64,
    /// The pass's AWS handle, when a backend needs one.
    aws: Option<&'a crate::aws::Aws>,
}

/// Open the pipeline's WAL where the settings put it: segment files under the state
/// directory, or objects under `wal/{tenant}/{workspace}/{pipeline}/` in the WAL bucket.
fn open_wal<'a>(
    place: WalPlace<'a>,
    options: &SyncOptions,
) -> Result<(Box<dyn Wal + 'a>, crate::wal::Recovery), PipelineError> {
    let wal_err = |source| PipelineError::Wal {
        pipeline: place.pipeline.to_owned(),
        source,
    };
    match place.settings.wal_storage {
        WalStorage::Disk => {
            let (wal, recovery) = DiskWal::open(place.dir, options.wal.clone()).map_err(wal_err)?;
            Ok((Box::new(wal), recovery))
        }
        WalStorage::S3 => {
            let (bucket, prefix) = s3_wal_place(place.settings, place.pipeline)?;
            let aws = place.aws.ok_or_else(|| PipelineError::Aws {
                pipeline: place.pipeline.to_owned(),
                source: crate::aws::AwsError::NotLoaded {
                    purpose: "the S3 WAL",
                },
            })?;
            let (wal, recovery) = crate::wal::s3::S3Wal::open(crate::wal::s3::S3WalConfig {
                aws: aws.clone(),
                bucket,
                prefix,
                store: place.store,
                partition: place.partition.to_owned(),
                fence: place.fence,
                recorded_through: place.recorded_through,
            })
            .map_err(wal_err)?;
            Ok((Box::new(wal), recovery))
        }
    }
}

/// Names of the failpoints of the pass (see [`crate::wal::failpoint`] for how to fire them).
pub mod failpoint {
    /// After the batch was typed (and the schema saved), before its WAL commit.
    pub const BEFORE_WAL_COMMIT: &str = "sync.before_wal_commit";
    /// After the WAL commit, before the position is recorded in the state store.
    pub const AFTER_WAL_COMMIT: &str = "sync.after_wal_commit";
    /// After the position was recorded.
    pub const AFTER_POSITION: &str = "sync.after_position";
    /// After an evolved schema was saved, before the schema version is recorded.
    pub const AFTER_SCHEMA_SAVE: &str = "sync.after_schema_save";
    /// After the destination committed a delivery, before the acknowledgement is stored.
    pub const AFTER_DELIVER: &str = "sync.after_deliver";
    /// After the acknowledgement was stored, before the WAL reclaims the batches.
    pub const AFTER_ACK: &str = "sync.after_ack";
    /// After the WAL reclaimed delivered batches.
    pub const AFTER_RECLAIM: &str = "sync.after_reclaim";
    /// Every failpoint of the pass.
    pub const ALL: &[&str] = &[
        BEFORE_WAL_COMMIT,
        AFTER_WAL_COMMIT,
        AFTER_POSITION,
        AFTER_SCHEMA_SAVE,
        AFTER_DELIVER,
        AFTER_ACK,
        AFTER_RECLAIM,
    ];
}

/// Fire the failpoint `name` (aborts the process with the `failpoints` feature and
/// `SKIPPR_FAILPOINT=name`; in unit tests an armed hook makes it an error).
fn failpoint(name: &'static str) -> Result<(), crate::wal::WalError> {
    if crate::wal::failpoint::check(name) {
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

/// Most re-inferences of one batch after records broke an inference limit.
const MAX_INFERENCE_RETRIES: usize = 16;

/// Infer the schema of a batch's records not yet `rejected`; a record that breaks an inference
/// limit is marked rejected and the batch inferred again without it (a failed `add` may have
/// left the inferrer half-updated).
fn infer_batch(
    records: &[crate::sources::SourceRecord],
    transform: &crate::schema::TransformOptions,
    rejected: &mut [bool],
) -> Result<SchemaInferrer, SchemaError> {
    let mut retries = 0;
    'again: loop {
        let mut inferrer = SchemaInferrer::new(transform.clone());
        for (i, record) in records.iter().enumerate() {
            if rejected[i] {
                continue;
            }
            if let Err(e) = inferrer.add(&record.value) {
                if retries == MAX_INFERENCE_RETRIES {
                    return Err(e);
                }
                retries += 1;
                rejected[i] = true;
                continue 'again;
            }
        }
        return Ok(inferrer);
    }
}

/// A deadletter for a record that could not be typed.
fn untypeable(record: &crate::sources::SourceRecord, error: &str) -> Deadletter {
    let raw = serde_json::to_string(&record.value).unwrap_or_default();
    Deadletter {
        source_uri: record.position.uri.clone(),
        line: record.position.record,
        offset: record.position.offset,
        raw: Deadletter::clip_raw(&raw),
        error: error.to_owned(),
        code: crate::deadletter::FailureCode::Untypeable,
        namespace: None,
    }
}

/// The position item: the newest WAL batch id it follows (u64 LE), then the source checkpoint.
fn decode_position(
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
fn wait_for_disk(dir: &std::path::Path, pipeline: &str, stop: &AtomicBool) {
    let Ok(stats) = fs4::statvfs(dir) else { return };
    let used =
        |s: &fs4::FsStats| disk_used_fraction(s.total_space(), s.free_space(), s.available_space());
    if !disk_guard_pauses(stats.available_space(), used(&stats)) {
        return;
    }
    tracing::warn!(
        pipeline,
        available = stats.available_space(),
        "Disk nearly full: reading paused until usage drops to 80%."
    );
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_secs(5));
        match fs4::statvfs(dir) {
            Ok(s) if s.available_space() >= DISK_MIN_FREE && used(&s) <= 0.8 => break,
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    tracing::info!(pipeline, "Disk space recovered: reading resumes.");
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

/// Step 8 of the pass: deliver committed batches, acknowledge them, reclaim them.
///
/// Two destinations may take a batch: the data sink (its rows) and the deadletter sink (its
/// rejected records). Each has its own acknowledgement, so adding one later never skips
/// batches for it. The WAL is reclaimed only with a data sink (without one the WAL is the
/// dataset), through the lower of the two acknowledgements.
struct Delivery<'a> {
    data: Option<Acked<&'a crate::sinks::iceberg::IcebergSink>>,
    deadletters: Option<Acked<&'a crate::sinks::deadletter::DeadletterSink>>,
    store: &'a dyn StateStore,
    fence: Option<crate::state::Fence>,
    pipeline: &'a str,
    /// The delivery thread of the read loop, when running.
    worker: Option<Worker>,
    /// Outstanding WAL bytes that start a delivery during the read loop.
    threshold: u64,
    /// The pipeline's state partition.
    partition: String,
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
    delivered: crate::sinks::iceberg::Delivered,
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

/// The sort key of the deadletter sink's acknowledgement item.
pub const DEADLETTER_ACK_SORT_KEY: &str = "ack#deadletters";

impl<'a> Delivery<'a> {
    fn start(
        data: Option<&'a crate::sinks::iceberg::IcebergSink>,
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
                let (key, acked) = acked(ACK_SORT_KEY)?;
                Some(Acked { sink, key, acked })
            }
            None => None,
        };
        let deadletters = match deadletters {
            Some(sink) => {
                let (key, acked) = acked(DEADLETTER_ACK_SORT_KEY)?;
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
            partition: partition.to_owned(),
        }))
    }

    /// The lowest acknowledgement of the configured sinks.
    fn acked(&self) -> u64 {
        let data = self.data.as_ref().map(|a| a.acked);
        let dead = self.deadletters.as_ref().map(|a| a.acked);
        data.into_iter().chain(dead).min().unwrap_or(0)
    }

    /// Committed batches some sink has not acknowledged.
    fn outstanding(&self, wal: &dyn Wal) -> Vec<crate::wal::BatchMeta> {
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
    fn deliver(
        &mut self,
        wal: &mut dyn Wal,
        schema: &PipelineSchema,
        report: &mut SyncReport,
    ) -> Result<(), PipelineError> {
        self.wait_for_worker(wal, report)?;
        let Some(job) = self.job(wal, schema) else {
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
            return Ok(());
        };
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
        self.complete(outcome, wal, report)
    }

    /// The outstanding batches as a job, or `None` when there are none.
    fn job(&self, wal: &dyn Wal, schema: &PipelineSchema) -> Option<Job> {
        let batches = self.outstanding(wal);
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
            if !meta.parts.iter().any(|p| p.namespace == REPLAYED_NAMESPACE) {
                continue;
            }
            let parts = wal.read(meta.id).map_err(|source| PipelineError::Wal {
                pipeline: pipeline.clone(),
                source,
            })?;
            for name in replayed_names(&parts) {
                let key = StateKey::new(&self.partition, format!("{REPLAYED_SORT_PREFIX}{name}"));
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
    fn start_worker<'scope>(
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
    /// thus make one Iceberg commit and few, large data files).
    fn poll(
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
        if self.outstanding_bytes(wal) < self.threshold {
            return Ok(());
        }
        let Some(job) = self.job(wal, schema) else {
            return Ok(());
        };
        let gone = self.worker_gone();
        if let Some(worker) = self.worker.as_mut() {
            worker.jobs.send(job).map_err(|_| gone)?;
            worker.in_flight = true;
        }
        Ok(())
    }

    /// Wait for the job in hand, if any, and complete it.
    fn wait_for_worker(
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
    fn stop_worker(&mut self) {
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

/// Deliver a job: rejected records first, then rows.
/// The sort key the lease check before each table commit writes (fenced, empty value).
pub const COMMIT_CHECK_SORT_KEY: &str = "lease#commit-check";

/// Proves, right before each table commit, that the writer still holds its lease: a fenced
/// write to [`COMMIT_CHECK_SORT_KEY`]. Without a fence (no lease token) it checks nothing.
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
        let key = StateKey::new(self.partition.as_str(), COMMIT_CHECK_SORT_KEY);
        self.store
            .put(&key, b"", Condition::Any, self.fence)
            .map(|_| ())
            .map_err(|source| crate::sinks::SinkError::LeaseLost {
                table: table.to_owned(),
                source: Box::new(source),
            })
    }
}

fn run_job(
    data: Option<&crate::sinks::iceberg::IcebergSink>,
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
    let mut delivered = crate::sinks::iceberg::Delivered::default();
    if let Some(sink) = data {
        let todo: Vec<_> = job
            .batches
            .iter()
            .filter(|b| b.id.0 > job.data_acked)
            .cloned()
            .collect();
        delivered = sink.deliver_guarded(&todo, read, &job.schema, &|table| guard.check(table))?;
    }
    Ok(Outcome {
        last,
        batches: job.batches.len(),
        delivered,
        dead_files,
        started,
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

/// The WAL part naming the deadletter files a replay batch holds the records of.
pub const REPLAYED_NAMESPACE: &str = "_replayed";
/// State sort-key prefix of the replayed-file markers (`replayed#{file}`).
pub const REPLAYED_SORT_PREFIX: &str = "replayed#";

fn replayed_batch(files: &[String]) -> Result<arrow::array::RecordBatch, arrow::error::ArrowError> {
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("file", arrow::datatypes::DataType::Utf8, false),
    ]));
    arrow::array::RecordBatch::try_new(
        schema,
        vec![Arc::new(arrow::array::StringArray::from_iter_values(files))],
    )
}

/// The file names in a batch's `_replayed` part.
fn replayed_names(parts: &[BatchPart]) -> Vec<String> {
    use arrow::array::{Array, AsArray};
    parts
        .iter()
        .filter(|p| p.namespace == REPLAYED_NAMESPACE)
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
fn replay_unsupported(pipeline: &ValidatedPipeline) -> ConfigError {
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
struct ReplayPlan<'a> {
    /// The deadletter sink the objects are in.
    sink: &'a crate::sinks::deadletter::DeadletterSink,
    /// The deadletter objects not replayed yet (names relative to the sink's target).
    files: Vec<String>,
    /// The source position every replay batch records (unchanged by a replay).
    position: Vec<u8>,
}

impl<'a> ReplayPlan<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
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
            .scan_prefix(partition, REPLAYED_SORT_PREFIX)
            .map_err(state_err)?
            .into_iter()
            .filter_map(|(sort, _)| sort.strip_prefix(REPLAYED_SORT_PREFIX).map(str::to_owned))
            .collect();
        for meta in wal.batches() {
            if meta.parts.iter().any(|p| p.namespace == REPLAYED_NAMESPACE) {
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
    fn set_aside(&self, names: &[String]) {
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

#[cfg(test)]
mod tests {
    use super::disk_used_fraction;

    /// Regression: the guard took `1 - available / total` for the used share, which counts
    /// the blocks reserved for root (and any gap between size and used + available) as used.
    /// On a 252 GB disk with 70 GB used and 22 GB available (`df`: 77%) it read 91% and
    /// paused every pass.
    #[test]
    fn the_disk_guard_reads_usage_as_df_does() {
        const G: u64 = 1 << 30;
        let share = disk_used_fraction(252 * G, 182 * G, 22 * G);
        assert!((share - 70.0 / 92.0).abs() < 1e-9, "{share}");
        assert!(share < 0.8);
        assert!(disk_used_fraction(100 * G, 5 * G, 0) > 0.99);
        assert_eq!(disk_used_fraction(0, 0, 0), 0.0);
    }
}
