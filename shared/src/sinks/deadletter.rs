//! The `File` deadletter sink: each WAL batch's rejected records as one file.
//!
//! Rejected records are committed to the WAL with their batch (the `_deadletters` part, see
//! [`crate::deadletter::WAL_NAMESPACE`]) and delivered from there like data: a batch's
//! records go to `{path}/{pipeline}/b{batch id, 20 digits}.jsonl` (or `.parquet`), written
//! whole under a temporary name and renamed into place. A retry after a crash writes the same
//! file again, so no record is ever appended twice.

use std::path::{Path, PathBuf};

use crate::config::connectors::{DeadletterConnector, OutputFormat};
use crate::config::validate::Named;
use crate::deadletter::WAL_NAMESPACE;
use crate::sinks::SinkError;
use crate::sinks::iceberg::storage::write_atomic;
use crate::wal::{BatchId, BatchMeta, BatchPart, WalError};

/// Rejected records as files in a directory.
#[derive(Debug, Clone)]
pub struct FileDeadletterSink {
    dir: PathBuf,
    format: OutputFormat,
}

impl FileDeadletterSink {
    /// The sink of a pipeline's `deadletter_sink`, or `None` when it is not a `File` sink.
    /// Relative paths resolve against `base_dir`, then the working directory.
    pub fn open(
        sink: &Named<DeadletterConnector>,
        pipeline: &str,
        base_dir: &Path,
    ) -> Result<Option<Self>, SinkError> {
        let DeadletterConnector::File(c) = &sink.connector else {
            return Ok(None);
        };
        let path = Path::new(&c.path);
        let dir = if path.is_absolute() {
            path.to_path_buf()
        } else {
            base_dir.join(path)
        };
        let dir = std::path::absolute(&dir).unwrap_or(dir).join(pipeline);
        Ok(Some(FileDeadletterSink {
            dir,
            format: c.format.unwrap_or(OutputFormat::Jsonl),
        }))
    }

    /// The directory the files go to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of one batch.
    pub fn file_of(&self, batch: BatchId) -> PathBuf {
        let ext = match self.format {
            OutputFormat::Jsonl => "jsonl",
            OutputFormat::Parquet => "parquet",
        };
        self.dir.join(format!("b{:020}.{ext}", batch.0))
    }

    /// Write the rejected records of `batches`; returns how many files were written.
    pub fn deliver(
        &self,
        batches: &[BatchMeta],
        read: &mut dyn FnMut(BatchId) -> Result<Vec<BatchPart>, WalError>,
    ) -> Result<u64, SinkError> {
        let mut files = 0;
        for meta in batches {
            if !meta
                .parts
                .iter()
                .any(|p| p.namespace == WAL_NAMESPACE && p.rows > 0)
            {
                continue;
            }
            let parts = read(meta.id).map_err(|source| SinkError::Wal {
                batch: meta.id,
                source,
            })?;
            let Some(part) = parts.into_iter().find(|p| p.namespace == WAL_NAMESPACE) else {
                continue;
            };
            let path = self.file_of(meta.id);
            let bytes = self
                .encode(&part.batch)
                .map_err(|source| SinkError::Align {
                    table: "deadletters".to_owned(),
                    batch: meta.id,
                    source,
                })?;
            write_atomic(&path, &bytes).map_err(|source| SinkError::Io {
                path: path.clone(),
                source,
            })?;
            files += 1;
        }
        Ok(files)
    }

    fn encode(
        &self,
        batch: &arrow::array::RecordBatch,
    ) -> Result<Vec<u8>, arrow::error::ArrowError> {
        match self.format {
            OutputFormat::Jsonl => {
                let mut writer = arrow::json::LineDelimitedWriter::new(Vec::new());
                writer.write(batch)?;
                writer.finish()?;
                Ok(writer.into_inner())
            }
            OutputFormat::Parquet => {
                let mut out = Vec::new();
                let mut writer =
                    parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), None)
                        .map_err(|e| arrow::error::ArrowError::ExternalError(Box::new(e)))?;
                writer
                    .write(batch)
                    .map_err(|e| arrow::error::ArrowError::ExternalError(Box::new(e)))?;
                writer
                    .close()
                    .map_err(|e| arrow::error::ArrowError::ExternalError(Box::new(e)))?;
                Ok(out)
            }
        }
    }
}
