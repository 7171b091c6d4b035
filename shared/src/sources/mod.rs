//! Sources: connectors that read records.
//!
//! A source yields [`SourceBatch`]es: bounded groups of JSON-object records, each with the
//! [`Position`] just after it, plus the [`Deadletter`]s met on the way. The pipeline types the
//! records (see [`crate::schema`]) into Arrow record batches.
//!
//! The trait is synchronous on purpose: reading and parsing are CPU-bound, and the pipeline
//! drives a source on a blocking thread. A source backed by an async client bridges with a
//! runtime handle.

pub mod cells;
pub mod error;
pub mod file;
pub mod http;
pub mod postgres;
pub mod replay;
pub mod s3;
pub mod shaped;
pub mod stdin;

pub use error::{EtagChange, S3Operation, SourceError};

use serde::{Deserialize, Serialize};

use crate::deadletter::Deadletter;

/// Where a record came from, precise enough to resume right after it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Position {
    /// The file path (as matched by the configured path or glob) or object URI (shared by
    /// the records of one file or table: a `String` per record was an allocation per row).
    pub uri: std::sync::Arc<str>,
    /// Byte offset just after this record in the (decompressed) stream; for Parquet, the
    /// 0-based index of the next row.
    pub offset: u64,
    /// 1-based number of this record in its file: the line number for line formats (the
    /// header counts as line 1 in CSV), the element number in a JSON array, the row number
    /// in Parquet.
    pub record: u64,
}

/// One record read from a source.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRecord {
    /// The record's fields, in source order (empty while [`SourceRecord::unparsed`] holds the
    /// record's text instead).
    pub value: serde_json::Map<String, serde_json::Value>,
    /// The position just after this record.
    pub position: Position,
    /// The record's JSON text, not parsed yet. Only a source asked for unparsed records (the
    /// File source with [`file::FileSourceOptions::unparsed_json_lines`]) hands records out
    /// this way; [`SourceBatch::parse_unparsed`] parses them into `value` (or deadletters).
    pub unparsed: Option<UnparsedJson>,
    /// The record's values as typed cells, not a JSON object yet. Only a source asked for
    /// cells (the Postgres source's tables with
    /// [`postgres::PostgresSourceOptions::typed_cells`]) hands records out this way;
    /// [`SourceBatch::parse_unparsed`] turns them into `value`.
    pub cells: Option<cells::CellRow>,
    /// The namespace the source names for this record (table-safe already, such as
    /// `postgres_orders`), used where `transform.namespace_fields` route nothing; `None`: the
    /// pipeline's default namespace.
    pub namespace: Option<std::sync::Arc<str>>,
}

/// The text of a JSON-lines record that was not parsed when it was read.
///
/// The text may not be JSON at all, or not an object: parsing it decides whether it becomes
/// a record or a deadletter, exactly as when the source parses lines itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnparsedJson {
    /// The line, without its `\n`, a `\r` before that, or a byte order mark (a slice of the
    /// chunk the line was read in, shared with the other lines of that chunk).
    pub text: bytes::Bytes,
    /// The byte offset where the line starts (the deadletter's offset, should it be one).
    pub start: u64,
    /// How many of the batch's deadletters were read before this line, so that a deadletter
    /// made from it later takes its place in read order.
    pub deadletters_before: usize,
}

/// A bounded group of records read in one step.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SourceBatch {
    /// Records that parsed, in source order.
    pub records: Vec<SourceRecord>,
    /// Records that did not, in source order.
    pub deadletters: Vec<Deadletter>,
    /// Input bytes consumed by this batch (compressed bytes for compressed files).
    pub bytes_read: u64,
}

impl SourceBatch {
    /// Parse the [unparsed](SourceRecord::unparsed) records at the indexes `select` picks:
    /// a JSON object becomes the record's `value`; any other text leaves the records and
    /// becomes a deadletter (malformed JSON, or not an object), placed among the batch's
    /// deadletters in read order. The result is what the source would have given had it
    /// parsed those lines itself. A selected record of [cells](SourceRecord::cells) gets the
    /// JSON object its cells stand for as its `value`.
    pub fn parse_unparsed(&mut self, mut select: impl FnMut(usize) -> bool) {
        let mut inserted = 0;
        let mut earlier = std::mem::take(&mut self.deadletters).into_iter();
        let mut kept = 0;
        let records = std::mem::take(&mut self.records);
        self.records.reserve(records.len());
        for (index, mut record) in records.into_iter().enumerate() {
            if record.cells.is_some()
                && select(index)
                && let Some(cells) = record.cells.take()
            {
                record.value = cells.to_json();
            }
            let Some(unparsed) = record.unparsed.as_mut() else {
                self.records.push(record);
                continue;
            };
            if !select(index) {
                unparsed.deadletters_before += inserted;
                self.records.push(record);
                continue;
            }
            let Some(unparsed) = record.unparsed.take() else {
                continue;
            };
            match file::parse_json_object(&unparsed.text) {
                Ok(value) => {
                    record.value = value;
                    self.records.push(record);
                }
                Err((error, code)) => {
                    while kept < unparsed.deadletters_before {
                        let Some(dead) = earlier.next() else { break };
                        self.deadletters.push(dead);
                        kept += 1;
                    }
                    self.deadletters.push(Deadletter {
                        source_uri: record.position.uri.to_string(),
                        line: record.position.record,
                        offset: unparsed.start,
                        raw: file::raw_text(&unparsed.text),
                        error,
                        code,
                        namespace: None,
                    });
                    inserted += 1;
                }
            }
        }
        self.deadletters.extend(earlier);
    }
}

/// How far a source has got, for progress displays.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Input bytes consumed so far.
    pub bytes_done: u64,
    /// Input bytes in all, when known.
    pub bytes_total: Option<u64>,
    /// Files (objects) finished so far.
    pub files_done: u64,
    /// Files (objects) in all, when known.
    pub files_total: Option<u64>,
    /// Requests a network source sent so far, retries included (the HttpClient source; 0 for
    /// the others).
    pub requests: u64,
    /// Of those, the retries (after a 429, a 5xx, a timeout or a broken connection).
    pub retries: u64,
}

/// A request to stop reading, which the pipeline shares with its source: the flag a signal
/// handler sets, and the deadline of the pass. A source that may take long to fill a batch (an
/// API paging for `batch_size_seconds`, standard input waiting for lines) checks it while it
/// fills one: it then ends the batch with what it has, or ends reading (`Ok(None)`) when it
/// has nothing, so a stop request is answered in about a page's time, not a batch's.
#[derive(Debug, Clone, Default)]
pub struct StopRequest {
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
    deadline: Option<std::time::Instant>,
}

impl StopRequest {
    /// Stop once `flag` is set or `deadline` has passed.
    pub fn new(
        flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
        deadline: Option<std::time::Instant>,
    ) -> StopRequest {
        StopRequest { flag, deadline }
    }

    /// Whether reading should stop now.
    pub fn is_requested(&self) -> bool {
        self.flag.load(std::sync::atomic::Ordering::SeqCst)
            || self
                .deadline
                .is_some_and(|d| std::time::Instant::now() >= d)
    }
}

/// A connector that reads records.
pub trait Source: Send {
    /// Read the next batch; `Ok(None)` once the source has nothing more right now.
    fn next_batch(&mut self) -> Result<Option<SourceBatch>, SourceError>;

    /// How far reading has got.
    fn progress(&self) -> Progress;

    /// The source's position just after the last batch [`Source::next_batch`] returned, as
    /// opaque bytes to store with that batch.
    ///
    /// The contract, which `skipprd sync` relies on to resume after a crash:
    ///
    /// - the pipeline calls it right after each `next_batch` (and may call it before the
    ///   first, or after `Ok(None)` or an error); it reflects every record and deadletter
    ///   returned so far and nothing else, so it never runs ahead of what was handed out;
    /// - reopening the source at these bytes yields exactly the records (and deadletters)
    ///   after that batch, none lost and none repeated, with the same positions;
    /// - it also remembers what has been read, so a later pass at the last checkpoint reads
    ///   only what is new since;
    /// - the bytes are versioned; a source refuses bytes it cannot read with
    ///   [`SourceError::BadCheckpoint`], never by silently starting over.
    fn checkpoint(&self) -> Result<Vec<u8>, SourceError>;

    /// Watch `stop` while filling a batch (see [`StopRequest`]). The default ignores it: a
    /// source whose batches fill in bounded time (files, objects, a table) is asked between
    /// batches only.
    fn stop_on(&mut self, stop: StopRequest) {
        let _ = stop;
    }
}
