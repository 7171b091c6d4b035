//! The [`Sink`] trait: the delivery side of the commit protocol, behind which every
//! destination sits.
//!
//! The pipeline hands a sink committed WAL batches in id order ([`Sink::write`]); the sink
//! makes that idempotent by the batches' stable ids: it records which ids landed atomically
//! with the data, skips them when a crash makes the pipeline deliver them again, and reports
//! what has landed ([`Sink::landed`]). Only then does the pipeline acknowledge the batches in
//! the state store and reclaim them from the WAL (see `docs/commit-protocol.md`, step 8).
//!
//! Implementations: [`super::iceberg::IcebergSink`] (the `Duckdb`, `SkipprLake` and
//! `AthenaIceberg` destinations) and [`super::memory::MemorySink`] (tests). The deadletter
//! sinks ([`super::deadletter`]) take a batch's rejected records, not its rows.

use crate::schema::PipelineSchema;
use crate::wal::{BatchId, BatchMeta, BatchPart, WalError};

use super::SinkError;

/// Reads a committed batch's parts from the WAL, by id.
pub type ReadBatch<'a> = &'a mut dyn FnMut(BatchId) -> Result<Vec<BatchPart>, WalError>;

/// Run by a sink with a table's name right before it commits to that table: the pipeline
/// proves there that the writer still holds its lease (a fenced state write), so a writer
/// that stalled past its lease, and was replaced, publishes nothing. An error leaves the table
/// untouched and ends the delivery.
pub type CommitCheck<'a> = &'a (dyn Fn(&str) -> Result<(), SinkError> + Sync);

/// What one delivery did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    /// The highest batch id now landed in every table it has rows for.
    pub through: Option<BatchId>,
    /// Rows written (batches that had landed before are not counted).
    pub rows: u64,
    /// Data files written.
    pub files: u64,
    /// Table commits made.
    pub commits: u64,
    /// Batch parts skipped because they had already landed.
    pub skipped_parts: u64,
    /// The rows of those parts. `rows + skipped_rows` is every data row of the batches (the
    /// pipeline checks it before acknowledging them).
    pub skipped_rows: u64,
}

impl Delivered {
    /// Whether `meta`'s batch has rows to write: a part with rows for a table being written
    /// (`landed` gives its landed id; `None`: not written here) that has not landed it yet.
    /// When it has none, its parts with rows for such tables are counted as skipped, landed
    /// before.
    pub fn wants(&mut self, meta: &BatchMeta, landed: impl Fn(&str) -> Option<u64>) -> bool {
        let wanted = meta
            .parts
            .iter()
            .any(|p| p.rows > 0 && landed(&p.namespace).is_some_and(|l| meta.id.0 > l));
        if !wanted {
            for part in meta
                .parts
                .iter()
                .filter(|p| p.rows > 0 && landed(&p.namespace).is_some())
            {
                self.skipped_parts += 1;
                self.skipped_rows += part.rows;
            }
        }
        wanted
    }
}

/// A destination of committed WAL batches, exactly once by batch id.
///
/// A table of the destination holds one namespace's rows ([`crate::wal::PartKind::Data`]
/// parts); bookkeeping parts are never written to tables.
pub trait Sink: Send + Sync + std::fmt::Debug {
    /// Where the sink writes, for logs and messages (a warehouse URI and namespace).
    fn location(&self) -> String;

    /// Make the tables of `namespaces` ready for `schema`: create the missing ones, evolve
    /// the others to hold their namespace's schema. [`Sink::write`] does this itself for the
    /// tables it writes; this is for callers that want the tables before any row.
    ///
    /// # Errors
    ///
    /// [`SinkError`] when a table cannot be created or evolved (an incompatible column, the
    /// destination unavailable).
    fn prepare(&self, namespaces: &[&str], schema: &PipelineSchema) -> Result<(), SinkError>;

    /// The highest WAL batch id of this pipeline that has landed in the table of `namespace`
    /// (0 when none has, or when the table does not exist).
    ///
    /// # Errors
    ///
    /// [`SinkError`] when the table cannot be read.
    fn landed(&self, namespace: &str) -> Result<u64, SinkError>;

    /// The highest WAL batch id of this pipeline that has landed in any table of the
    /// destination (0 when none has). The pipeline compares it with its WAL's ids when its
    /// state store knows nothing, to notice a WAL that restarted its numbering (see
    /// `docs/wal.md`, "A WAL that restarts").
    ///
    /// # Errors
    ///
    /// [`SinkError`] when the tables cannot be listed or read.
    fn landed_any(&self) -> Result<u64, SinkError>;

    /// Write the committed `batches` (ascending ids) to their tables, exactly once: parts of a
    /// batch at or below a table's [`Sink::landed`] id are skipped. `read` reads a batch's
    /// parts from the WAL; `before_commit` runs right before each table commit. Returns once
    /// every table commit is durable.
    ///
    /// # Errors
    ///
    /// [`SinkError`] when a batch cannot be read or written, or `before_commit` refuses; the
    /// tables committed before the error keep their batches (and skip them next time).
    fn write(
        &self,
        batches: &[BatchMeta],
        read: ReadBatch<'_>,
        schema: &PipelineSchema,
        before_commit: CommitCheck<'_>,
    ) -> Result<Delivered, SinkError>;
}
