//! Progress events, the one stream both people and scripts read.
//!
//! With `--output json` each event is printed as one JSON object per line, tagged by `event`
//! (`discover_start`, `discover_progress`, `namespace_discovered`, `discover_complete`,
//! `discover_error`; `sync_start`, `sync_status`, `schema_evolved`, `sync_complete`,
//! `sync_error`; `lease_waiting`; `maintain_complete`, `maintain_error`; `reset`,
//! `reset_error`; `metadata_applied`; `schema_error`; `store_ready`, `store_error`). Field names are stable: scripts depend on them.
//!
//! Every JSON line also carries the fields of its run ([`RunStamp`]): `timestamp` (RFC 3339,
//! UTC, to the millisecond), `run_id` (one per run of a command: a CLI process, a Lambda
//! invocation) and `phase` (the command the event belongs to: `discover`, `sync`, `schema`,
//! `query`, `maintain`, `reset`, `replay`, `store`, `doctor`, `metadata`), right after
//! `event`.

use std::path::PathBuf;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

/// Something that happened while a command ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// `discover` started reading the source.
    DiscoverStart {
        /// The pipeline.
        pipeline: String,
        /// The source's logical name.
        source: String,
        /// Files to read, when known.
        files: Option<u64>,
        /// Input bytes in all, when known.
        bytes_total: Option<u64>,
    },
    /// `discover` read another batch.
    DiscoverProgress {
        /// The pipeline.
        pipeline: String,
        /// Records sampled so far.
        records: u64,
        /// Deadletter records so far.
        deadletters: u64,
        /// Input bytes read so far.
        bytes: u64,
        /// Input bytes in all, when known.
        bytes_total: Option<u64>,
        /// Files finished so far.
        files_done: u64,
    },
    /// A namespace (table) and its inferred fields.
    NamespaceDiscovered {
        /// The pipeline.
        pipeline: String,
        /// The namespace name.
        namespace: String,
        /// Records sampled in it.
        records: u64,
        /// Top-level fields, with their types (`name: type`).
        fields: Vec<String>,
    },
    /// `discover` finished and saved the schema.
    DiscoverComplete {
        /// The pipeline.
        pipeline: String,
        /// Namespaces found.
        namespaces: u64,
        /// Records sampled.
        records: u64,
        /// Records rejected as deadletters.
        deadletters: u64,
        /// Input bytes read.
        bytes: u64,
        /// Wall time.
        seconds: f64,
        /// Where the schema was saved.
        schema_path: PathBuf,
        /// The same as `namespaces`, under the real product's name.
        namespaces_discovered: u64,
        /// Fields in all namespaces, nested struct fields counted one each.
        total_fields: u64,
        /// Wall time in milliseconds.
        elapsed_ms: u64,
    },
    /// `discover` failed.
    DiscoverError {
        /// The pipeline, when known.
        pipeline: Option<String>,
        /// The error, one line.
        message: String,
        /// Whether running again unchanged might succeed.
        retryable: bool,
    },
    /// `sync` took the lease and recovered; reading starts.
    SyncStart {
        /// The pipeline.
        pipeline: String,
        /// The source's logical name.
        source: String,
        /// Committed batches in the WAL at the start.
        committed_batches: u64,
        /// Bytes of a torn WAL tail that recovery truncated.
        recovered_truncated_bytes: u64,
    },
    /// `sync` committed more batches.
    SyncStatus {
        /// The pipeline.
        pipeline: String,
        /// Rows committed so far in this pass.
        rows: u64,
        /// Batches committed so far.
        batches: u64,
        /// Input bytes read so far.
        bytes: u64,
        /// Input bytes to read in this pass, when known.
        bytes_total: Option<u64>,
        /// Records rejected so far.
        deadletters: u64,
    },
    /// The schema changed during `sync` and was saved.
    SchemaEvolved {
        /// The pipeline.
        pipeline: String,
        /// The new schema version.
        version: u32,
        /// What changed, one line each.
        changes: Vec<String>,
    },
    /// A `sync` pass finished: the pipeline and the pass's report, its fields at the top
    /// level (`rows`, `batches`, ..., `aws_requests`).
    SyncComplete {
        /// The pipeline.
        pipeline: String,
        /// What the pass did.
        #[serde(flatten)]
        report: crate::pipeline::sync::SyncReport,
    },
    /// A `sync` pass failed.
    SyncError {
        /// The pipeline, when known.
        pipeline: Option<String>,
        /// The error, one line.
        message: String,
        /// Whether running again unchanged might succeed.
        retryable: bool,
    },
    /// `maintain` finished a pipeline's tables.
    MaintainComplete {
        /// The pipeline.
        pipeline: String,
        /// Tables looked at.
        tables: u64,
        /// Snapshots expired.
        snapshots_expired: u64,
        /// Small data files compaction replaced.
        files_compacted_from: u64,
        /// Data files compaction wrote.
        files_compacted_to: u64,
        /// Unreferenced files deleted (data, manifests, manifest lists, old metadata).
        files_deleted: u64,
        /// Bytes of the deleted files.
        bytes_freed: u64,
        /// Wall time.
        seconds: f64,
    },
    /// `maintain` failed.
    MaintainError {
        /// The pipeline, when known.
        pipeline: Option<String>,
        /// The error, one line.
        message: String,
        /// Whether running again unchanged might succeed.
        retryable: bool,
    },
    /// `query` failed.
    QueryError {
        /// The error, one line.
        message: String,
        /// Whether running again unchanged might succeed.
        retryable: bool,
    },
    /// `store create` made sure the state store's DynamoDB table exists.
    StoreReady {
        /// The table.
        table: String,
        /// Its region.
        region: String,
        /// Whether it was created now (`false`: it already existed).
        created: bool,
    },
    /// `store create` failed.
    StoreError {
        /// The error, one line.
        message: String,
        /// Whether running again unchanged might succeed.
        retryable: bool,
    },
    /// A command is waiting for the pipeline's writer lease, held by another writer (said
    /// once, when the wait starts).
    LeaseWaiting {
        /// The pipeline.
        pipeline: String,
        /// Who holds the lease: `host/pid/random` (DynamoDB) or the holder's pid (local lock).
        holder: String,
        /// Milliseconds until the holder's lease expires (DynamoDB; negative: already past),
        /// `None` for a local lock, which is held until its process ends.
        expires_in_ms: Option<i64>,
        /// The longest this command waits before giving up, in milliseconds.
        wait_ms: u64,
    },
    /// `reset` looked at (and, when `applied`, cleared) the pipeline's state.
    Reset {
        /// The pipeline.
        pipeline: String,
        /// What was found and cleared.
        #[serde(flatten)]
        report: crate::pipeline::reset::ResetReport,
    },
    /// `reset` failed.
    ResetError {
        /// The pipeline, when known.
        pipeline: Option<String>,
        /// The error, one line.
        message: String,
        /// Whether running again unchanged might succeed.
        retryable: bool,
    },
    /// `metadata apply` merged a schema into the saved one.
    MetadataApplied {
        /// The pipeline.
        pipeline: String,
        /// Whether the saved schema changed (`false`: it already held everything).
        changed: bool,
        /// The schema version after the save.
        version: Option<u32>,
        /// Namespaces in the saved schema now.
        namespaces: u64,
        /// Where the schema is saved.
        schema_path: PathBuf,
    },
    /// `schema` failed.
    SchemaError {
        /// The pipeline, when known.
        pipeline: Option<String>,
        /// The error, one line.
        message: String,
        /// Whether running again unchanged might succeed.
        retryable: bool,
    },
}

/// The fields every JSON event line of one run carries besides the event's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStamp {
    /// One id per run of a command (a CLI process, a Lambda invocation).
    pub run_id: String,
    /// The command the events belong to (`discover`, `sync`, ...).
    pub phase: &'static str,
}

impl RunStamp {
    /// A stamp with a fresh random run id.
    pub fn new(phase: &'static str) -> RunStamp {
        RunStamp {
            run_id: uuid::Uuid::new_v4().simple().to_string(),
            phase,
        }
    }

    /// `event` as one JSON line, stamped now.
    pub fn json_line(&self, event: &Event) -> Result<String, serde_json::Error> {
        let value = serde_json::to_value(event)?;
        Ok(self.stamp_at(value, Utc::now()).to_string())
    }

    /// A JSON object with the stamp's fields put right after its `event` field (first when it
    /// has none); a field of the object's own under one of those names is kept and wins.
    /// Anything but an object is returned as it is.
    pub fn stamp_at(&self, value: Value, now: DateTime<Utc>) -> Value {
        let Value::Object(fields) = value else {
            return value;
        };
        let mut out = Map::with_capacity(fields.len() + 3);
        let mut fields = fields;
        if let Some(event) = fields.shift_remove("event") {
            out.insert("event".to_owned(), event);
        }
        let stamp = [
            (
                "timestamp",
                Value::from(now.to_rfc3339_opts(SecondsFormat::Millis, true)),
            ),
            ("run_id", Value::from(self.run_id.clone())),
            ("phase", Value::from(self.phase)),
        ];
        for (key, value) in stamp {
            if !fields.contains_key(key) {
                out.insert(key.to_owned(), value);
            }
        }
        out.extend(fields);
        Value::Object(out)
    }
}

/// Receives events as a command runs.
pub trait Observer {
    /// Called for each event, in order.
    fn event(&mut self, event: &Event);
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Observer for Silent {
    fn event(&mut self, _: &Event) {}
}

/// An observer that keeps every event (for tests and summaries).
#[derive(Debug, Default, Clone)]
pub struct Recorder(pub Vec<Event>);

impl Observer for Recorder {
    fn event(&mut self, event: &Event) {
        self.0.push(event.clone());
    }
}

#[cfg(test)]
mod tests;
