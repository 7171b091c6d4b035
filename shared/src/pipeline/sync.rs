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
//! Reading (4) runs on its own thread, a couple of batches ahead; steps 5-7 run in order on
//! the calling thread. A stop request (SIGINT/SIGTERM) is honoured between batches: the batch
//! being committed is finished, nothing is half-written.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::config::ConfigError;
use crate::config::validate::{StoreKind, ValidatedConfig, ValidatedPipeline, WalStorage};
use crate::deadletter::Deadletter;
use crate::schema::{
    PipelineSchema, RecordBatchBuilder, SchemaError, SchemaInferrer, SchemaStore, evolve,
    namespace_for,
};
use crate::state::{Condition, StateKey, StateStore};
use crate::wal::{BatchPart, DiskWal, WalOptions};

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
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            stop: Arc::new(AtomicBool::new(false)),
            lease_wait: crate::state::DEFAULT_LEASE_WAIT,
            progress_interval: Duration::from_millis(500),
            wal: WalOptions::default(),
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
}

/// The sort key of the source position item.
pub const POSITION_SORT_KEY: &str = "position";
/// The sort key of the schema version item.
pub const SCHEMA_VERSION_SORT_KEY: &str = "schema#version";

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
    if settings.wal_storage == WalStorage::S3 {
        return Err(ConfigError::UnsupportedSetting {
            setting: "WAL_STORAGE".into(),
            value: "s3".into(),
            note: Some("the S3 WAL comes with the AWS backends; use `disk`".into()),
        }
        .into());
    }
    if let StoreKind::Dynamodb { .. } = settings.store {
        return Err(ConfigError::UnsupportedSetting {
            setting: "skippr.store.type".into(),
            value: "dynamodb".into(),
            note: Some(
                "the DynamoDB store comes with the AWS backends; use `sled` (embedded)".into(),
            ),
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

    // 1. Lease (the store is opened under it).
    let held = Held::take(settings, pipeline, options.lease_wait)?;
    let (store, partition, state_dir) = (&held.store, &held.partition, &held.state_dir);
    let fence = Some(held.fence());

    // 2. Recover.
    let (mut wal, recovery) =
        DiskWal::open(&state_dir.join("wal"), options.wal.clone()).map_err(wal_err)?;
    for warning in &recovery.warnings {
        tracing::warn!(pipeline = %name, "{warning}");
    }
    let position_key = StateKey::new(partition.as_str(), POSITION_SORT_KEY);
    // The recorded position names the newest WAL batch it follows. When that is the WAL's
    // newest committed batch, the record is current (it may even be newer than the WAL's
    // position: a batch whose every record was rejected moves the position without a WAL
    // batch). Otherwise a crash came between a WAL commit and the position update, and the
    // WAL, which carries the position each batch reached, is the authority.
    let newest = wal.next_id().0.saturating_sub(1);
    let recorded = store
        .get(&position_key)
        .map_err(state_err)?
        .map(|item| decode_position(&position_key, &item.value))
        .transpose()
        .map_err(state_err)?;
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

    // 3. Deliver: no destination in this build, so the WAL is the dataset.
    let schemas = schema_store(settings, pipeline)?;
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

    // 4-7. Read, type, commit, record.
    let source =
        open_source_unparsed_at(pipeline, settings, &config.base_dir, position.as_deref())?;
    let typing = Typing::new(&schema, transform_options(pipeline));
    let transform = typing.transform();
    let mut report = SyncReport::default();
    let mut last_status = Instant::now();
    let mut dl_log = DeadletterLog::new(&name);
    let disk_dir = state_dir.clone();
    // Typing's first try (with the schema as it is) runs on the reader thread while this one
    // is busy, and here when it is not (see `typing`).
    let mut reader_typer = crate::schema::JsonLineTyper::default();
    let mut typer = crate::schema::JsonLineTyper::default();
    let prepare = |batch| typing.prepare(batch, &mut reader_typer);
    read_ahead_with(source, 2, prepare, |steps| -> Result<(), PipelineError> {
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
                    for (record, _) in batch.records.iter().zip(&rejected).filter(|(_, r)| **r) {
                        report.deadletters += 1;
                        dl_log.log(&untypeable(
                            record,
                            "breaks an inference limit (too many fields or namespaces)",
                        ));
                    }
                    let changes = evolve(&mut schema, &inferrer.finish(&name, &settings.workspace));
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
                    for (record, _) in batch.records.iter().zip(&rejected).filter(|(_, r)| !**r) {
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
            // Commit, then record the position. A batch whose every record was rejected has
            // nothing to commit: only the position moves (past the rejected records).
            failpoint(failpoint::BEFORE_WAL_COMMIT).map_err(wal_err)?;
            let batch_id = if parts.is_empty() {
                wal.next_id().0.saturating_sub(1)
            } else {
                let meta = wal.append(&checkpoint, &parts).map_err(wal_err)?;
                report.batches += 1;
                meta.id.0
            };
            failpoint(failpoint::AFTER_WAL_COMMIT).map_err(wal_err)?;
            put_position(store, &position_key, batch_id, &checkpoint, fence).map_err(state_err)?;
            failpoint(failpoint::AFTER_POSITION).map_err(wal_err)?;
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
            wait_for_disk(&disk_dir, &name, &options.stop);
            if options.stop.load(Ordering::SeqCst) {
                report.stopped = true;
                return Ok(());
            }
        }
        Ok(())
    })?;
    // The store and the WAL go before the lease: a writer waiting for the lock must find them
    // closed (redb admits one process at a time).
    drop(wal);
    drop(held);
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
    });
    Ok(report)
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
    /// Every failpoint of the pass.
    pub const ALL: &[&str] = &[
        BEFORE_WAL_COMMIT,
        AFTER_WAL_COMMIT,
        AFTER_POSITION,
        AFTER_SCHEMA_SAVE,
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
    let used = |s: &fs4::FsStats| 1.0 - s.available_space() as f64 / s.total_space().max(1) as f64;
    if stats.available_space() >= DISK_MIN_FREE && used(&stats) < 0.9 {
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
