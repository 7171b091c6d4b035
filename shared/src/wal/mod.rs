//! The write-ahead log: a durable, checksummed log of typed batches, on local disk
//! ([`DiskWal`], segment files) or in S3 ([`s3::S3Wal`], an object per batch and a commit
//! marker), both behind the [`Wal`] trait. What follows describes the disk WAL; the S3 WAL
//! keeps the same rules with objects (see [`s3`] and `docs/wal.md`).
//!
//! Each source batch, once typed, is appended here as one WAL batch: a [`BatchId`], the source
//! position it reached (opaque bytes: the caller's serialized checkpoint) and one or more
//! [`BatchPart`]s, each an Arrow record batch for one namespace and schema version. When
//! [`DiskWal::append`] returns `Ok`, the batch is committed: it survives `kill -9` and power
//! loss. Data is deleted only by [`DiskWal::reclaim_through`], which the pipeline calls once the
//! destination has acknowledged the batches; without a destination nothing is reclaimed and the
//! WAL is the dataset.
//!
//! The full specification is `docs/wal.md`. In short:
//!
//! - The WAL directory holds segment files `wal-{first_batch_id:020}.seg`. Appends go to the
//!   last (active) segment; a new one is started once the active one reaches
//!   [`WalOptions::segment_target_bytes`]. A segment is created as `….seg.tmp`, fsynced, renamed,
//!   and the directory fsynced, so a segment header is never torn.
//! - A batch is a **data record** followed by a **commit record** naming the data record's
//!   offset and CRC; both are written, then the file is fsynced. A batch is committed iff both
//!   records are complete and their checksums match. A **reclaim record** notes that batches up
//!   to an id were acknowledged, so they stay hidden after a restart even while their segment
//!   still holds unacknowledged batches too.
//! - Checksums are **CRC32C (Castagnoli)**, over the header fields and the payload of each
//!   record. Everything is little-endian.
//!
//! Segment header (**do not reorder**; pinned by a golden-bytes test in `format.rs`):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `SKPRWAL\0` |
//! | 8 | 2 | format version `u16` = 1 |
//! | 10 | 2 | flags `u16`: bit 0 = a previous position follows; other bits 0 |
//! | 12 | 8 | first batch id `u64` (equals the id in the file name) |
//! | 20 | 4 | previous position length P `u32` (0 when bit 0 is clear) |
//! | 24 | P | previous position: that of the newest batch committed before this segment |
//! | 24+P | 4 | CRC32C of bytes 0..24+P |
//!
//! Record (**do not reorder**):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `C5 57 52 43` |
//! | 4 | 1 | kind: 1 data, 2 commit, 3 reclaim |
//! | 5 | 3 | reserved, 0 |
//! | 8 | 8 | batch id `u64` (reclaim: the id reclaimed through) |
//! | 16 | 4 | payload length N `u32` |
//! | 20 | 4 | CRC32C of bytes 0..20, then of the payload |
//! | 24 | N | payload |
//!
//! Data payload: position length `u32`, position bytes, part count `u32`, then per part:
//! namespace length `u16`, namespace (UTF-8), schema version `u32`, row count `u64`, IPC length
//! `u32`, and an Arrow IPC stream (one schema message, one record batch, end marker) with
//! `LZ4_FRAME` buffer compression, or none ([`WalCompression`]: the IPC message says which, so
//! a reader takes either, and one WAL may hold both). Commit payload: data record offset
//! `u64`, data record CRC `u32`. Reclaim payload: empty.
//!
//! Recovery ([`DiskWal::open`]): a torn tail after the last complete unit of the **last**
//! segment (partial header or payload, data without commit, zero fill) is truncated and
//! reported in [`Recovery`]; damage followed by any later valid record, or anywhere in an
//! earlier segment, is [`WalError::Corrupt`]; segments whose ids do not follow on from each
//! other are [`WalError::SegmentGap`]; an empty or missing directory is a fresh WAL.
//!
//! [`DiskWal::open_read_only`] lists and reads the committed batches without writing anything
//! ([`ReadOnlyWal`]): a torn tail is not cut but simply not visible, so it is safe while a
//! writer appends. `skipprd query` uses it.

#[cfg(test)]
mod conformance;
mod disk;
mod error;
/// The WAL's failpoints: its names ([`crate::failpoint::wal`]) and the mechanism.
pub mod failpoint {
    pub use crate::failpoint::ENV_VAR;
    pub(crate) use crate::failpoint::check;
    pub use crate::failpoint::wal::*;
    #[cfg(test)]
    pub(crate) use crate::failpoint::{arm, disarm};
}
mod format;
mod read_only;
pub mod s3;
#[cfg(test)]
mod s3_tests;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::PathBuf;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

pub use disk::{DiskWal, read_committed};
pub use error::WalError;
pub use format::{
    FORMAT_VERSION, MAX_NAMESPACE_BYTES, MAX_PARTS, MAX_PAYLOAD_BYTES, MAX_POSITION_BYTES,
};
pub use read_only::ReadOnlyWal;
pub use s3::S3WalView;

/// A write-ahead log as the pipeline uses it, whatever holds it: segment files on disk
/// ([`DiskWal`]) or objects in S3 ([`s3::S3Wal`]). The guarantees are the same: when
/// [`Wal::append`] returns `Ok` the batch is committed and survives a crash; batch ids grow by
/// one and are never reused; only [`Wal::reclaim_through`] deletes committed data.
pub trait Wal: Send {
    /// Append a batch and make it durable (see [`DiskWal::append`]).
    fn append(&mut self, position: &[u8], parts: &[BatchPart]) -> Result<BatchMeta, WalError>;
    /// Committed batches that have not been reclaimed, ascending by id.
    fn batches(&self) -> &[BatchMeta];
    /// The position of the newest committed batch, even after it was reclaimed; `None` when
    /// no batch was ever committed.
    fn last_position(&self) -> Option<&[u8]>;
    /// The id the next appended batch gets.
    fn next_id(&self) -> BatchId;
    /// Read a committed, unreclaimed batch back, verifying its checksum again.
    fn read(&self, id: BatchId) -> Result<Vec<BatchPart>, WalError>;
    /// Reclaim every batch up to and including `id` (acknowledged by the destination);
    /// returns how many files or objects were deleted.
    fn reclaim_through(&mut self, id: BatchId) -> Result<u64, WalError>;
    /// A reader of committed batches by their listing entries, for another thread (the
    /// delivery thread) while this handle goes on appending.
    fn reader(&self) -> std::sync::Arc<dyn WalReader>;
    /// Where the WAL lives, for messages: a directory or an `s3://` prefix.
    fn location(&self) -> String;
}

/// A read-only snapshot of a WAL's committed batches, wherever it lives: what `skipprd query`
/// scans while a `sync` may be appending. It never creates, cuts or deletes anything:
/// [`ReadOnlyWal`] for a directory, [`s3::S3WalView`] for an S3 prefix.
pub trait WalView: Send + Sync + fmt::Debug {
    /// Committed batches that had not been reclaimed when the snapshot was taken, ascending.
    fn batches(&self) -> &[BatchMeta];
    /// Read a batch of the snapshot back, verifying its checksum again. A batch reclaimed
    /// since the snapshot was taken may be gone ([`WalError::Io`] of kind not found on disk,
    /// [`WalError::Corrupt`] naming the missing object on S3).
    fn read(&self, id: BatchId) -> Result<Vec<BatchPart>, WalError>;
    /// The namespace, schema version and Arrow schema of each part of a batch, without
    /// decoding its rows.
    fn read_schemas(&self, id: BatchId) -> Result<Vec<(String, u32, SchemaRef)>, WalError>;
    /// A newer snapshot: batches committed (or reclaimed) since show up. What was already
    /// read and cannot change is not read again.
    fn refreshed(&self) -> Result<Box<dyn WalView>, WalError>;
    /// Where the WAL lives, for messages: a directory or an `s3://` prefix.
    fn location(&self) -> String;
}

/// Reads committed batches, given their [`BatchMeta`] (see [`Wal::reader`]).
pub trait WalReader: Send + Sync {
    /// Read the batch `meta` lists, verifying its checksums. The batch must be committed and
    /// stay unreclaimed while this runs.
    fn read_committed(&self, meta: &BatchMeta) -> Result<Vec<BatchPart>, WalError>;
}

/// A batch's id: stable, assigned by the WAL in order from 1, never reused for a committed
/// batch (not after a restart, and not after its segment is reclaimed). Displays as `b{n}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchId(pub u64);

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{}", self.0)
    }
}

/// How a batch's Arrow data is stored in the WAL (`WAL_COMPRESSION`).
///
/// Either way the payload is an Arrow IPC stream whose record batch message names its
/// compression, so readers take both and a WAL may hold batches of both kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WalCompression {
    /// Every Arrow buffer `LZ4_FRAME`-compressed: about 0.55-0.65x the bytes of `None`, for
    /// the CPU to compress each batch on commit and decompress it on delivery.
    #[default]
    Lz4,
    /// Arrow IPC as is: no compression work on commit or delivery, 1.5-1.8x the bytes on disk.
    None,
}

impl WalCompression {
    /// The compression a WAL gets when `WAL_COMPRESSION` is not set: none for a disk WAL whose
    /// batches a destination takes (they are reclaimed once delivered, so the bytes stay on disk
    /// only until the next delivery, and skipping the compression and decompression is the
    /// cheaper side), `lz4` where the WAL keeps the data (no destination) or the bytes cross
    /// the network (the S3 WAL).
    pub fn default_for(disk: bool, has_destination: bool) -> WalCompression {
        if disk && has_destination {
            WalCompression::None
        } else {
            WalCompression::Lz4
        }
    }
}

/// How a [`DiskWal`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalOptions {
    /// Start a new segment file once the active one holds at least this many bytes. Larger
    /// segments mean fewer files and fsyncs of the directory; smaller ones let
    /// [`DiskWal::reclaim_through`] free space sooner, since only whole segments are deleted.
    /// A single batch larger than this still goes into one segment. Default 64 MiB; at least
    /// [`WalOptions::MIN_SEGMENT_TARGET_BYTES`].
    pub segment_target_bytes: u64,
    /// fsync segment files and the directory, which is what makes a committed batch survive
    /// power loss. Default `true`; set `false` only in tests and benchmarks.
    pub fsync: bool,
    /// How each batch's Arrow data is written (read back either way). Default
    /// [`WalCompression::Lz4`].
    pub compression: WalCompression,
}

impl WalOptions {
    /// The default segment size target: 64 MiB.
    pub const DEFAULT_SEGMENT_TARGET_BYTES: u64 = 64 << 20;
    /// The smallest segment size target accepted: 4 MiB (1 byte in this crate's unit tests).
    pub const MIN_SEGMENT_TARGET_BYTES: u64 = if cfg!(test) { 1 } else { 4 << 20 };
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_target_bytes: Self::DEFAULT_SEGMENT_TARGET_BYTES,
            fsync: true,
            compression: WalCompression::Lz4,
        }
    }
}

/// The name of the part that carries a batch's rejected records (see [`PartKind::Deadletters`]).
pub const DEADLETTERS_PART: &str = "_deadletters";
/// The name of the part that names the deadletter files a replay batch holds the records of
/// (see [`PartKind::Replayed`]).
pub const REPLAYED_PART: &str = "_replayed";
/// The name of the zero-row part that marks the end of a source read (see
/// [`PartKind::ReadEnd`]).
pub const READ_END_PART: &str = "_read_end";

/// What a part of a batch holds: a namespace's rows, or the pipeline's own bookkeeping.
///
/// Only data parts go to a destination's tables. Bookkeeping parts are told by their exact
/// reserved name ([`DEADLETTERS_PART`], [`REPLAYED_PART`], [`READ_END_PART`]), never by a
/// prefix: a data namespace may start with `_`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartKind {
    /// A namespace's rows, for its table.
    Data,
    /// The batch's rejected records, for the deadletter sink.
    Deadletters,
    /// The deadletter files a replay batch holds the records of.
    Replayed,
    /// No rows: the source's read ended with the batch before it (a pass that was not stopped
    /// and did not fail). Written only for pipelines whose tables are replaced by whole reads
    /// (`replace_table`, `replace_partition`): the batches between two such markers are one
    /// read, delivered together.
    ReadEnd,
}

impl PartKind {
    /// The kind of the part named `namespace`.
    pub fn of(namespace: &str) -> Self {
        match namespace {
            DEADLETTERS_PART => PartKind::Deadletters,
            REPLAYED_PART => PartKind::Replayed,
            READ_END_PART => PartKind::ReadEnd,
            _ => PartKind::Data,
        }
    }

    /// Whether the part holds a namespace's rows.
    pub fn is_data(self) -> bool {
        self == PartKind::Data
    }
}

/// One namespace's rows in a batch. A part may hold 0 rows (a source batch whose records for
/// that namespace were all deadlettered still records its schema version).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchPart {
    /// The namespace (table) the rows belong to: 1 to [`MAX_NAMESPACE_BYTES`] bytes.
    pub namespace: String,
    /// The version of the namespace's schema the rows were typed with.
    pub schema_version: u32,
    /// The rows.
    pub batch: RecordBatch,
}

impl BatchPart {
    /// What the part holds.
    pub fn kind(&self) -> PartKind {
        PartKind::of(&self.namespace)
    }

    /// The zero-row part that marks the end of a source read ([`PartKind::ReadEnd`]).
    pub fn read_end() -> BatchPart {
        let schema = arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(
            "read",
            arrow::datatypes::DataType::Utf8,
            true,
        )]);
        BatchPart {
            namespace: READ_END_PART.to_owned(),
            schema_version: 1,
            batch: RecordBatch::new_empty(std::sync::Arc::new(schema)),
        }
    }
}

/// A part as listed in a [`BatchMeta`], without its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartMeta {
    /// The namespace.
    pub namespace: String,
    /// The schema version.
    pub schema_version: u32,
    /// How many rows the part holds.
    pub rows: u64,
}

impl PartMeta {
    /// What the part holds.
    pub fn kind(&self) -> PartKind {
        PartKind::of(&self.namespace)
    }
}

/// A committed batch, as listed by [`DiskWal::batches`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchMeta {
    /// The batch's id.
    pub id: BatchId,
    /// The source position the batch reached.
    pub position: Vec<u8>,
    /// Its parts, in the order they were appended.
    pub parts: Vec<PartMeta>,
    /// The segment holding it, named by the segment's first batch id.
    pub segment: u64,
    /// Byte offset of its data record in the segment file.
    pub offset: u64,
    /// Bytes it takes on disk: data record plus commit record.
    pub bytes: u64,
}

impl BatchMeta {
    /// Whether the batch marks the end of a source read (holds a [`PartKind::ReadEnd`] part).
    pub fn ends_read(&self) -> bool {
        self.parts.iter().any(|p| p.kind() == PartKind::ReadEnd)
    }
}

/// What [`DiskWal::open`] found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Committed, unreclaimed batches found.
    pub batches: usize,
    /// Bytes of torn tail cut from the last segment (0 when it ended cleanly).
    pub truncated_bytes: u64,
    /// The segment that was cut, if any.
    pub truncated_segment: Option<PathBuf>,
    /// What was repaired or ignored, one line each (also logged at warn level).
    pub warnings: Vec<String>,
}

/// Size of the WAL on disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Segment files.
    pub segments: usize,
    /// Bytes in all segment files.
    pub bytes: u64,
    /// Committed, unreclaimed batches.
    pub batches: usize,
}
