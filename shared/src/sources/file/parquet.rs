//! Parquet: read in Arrow record batches, each row turned into a JSON object.
//!
//! Rows are converted by arrow's JSON writer with explicit nulls: nested structs become
//! objects, lists arrays, dates `"YYYY-MM-DD"` strings, timestamps ISO 8601 strings, binary
//! hex strings and decimals numbers.

use std::collections::VecDeque;
use std::path::Path;

use arrow::json::WriterBuilder;
use arrow::json::writer::LineDelimited;
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use serde_json::{Map, Value};

use super::compression::open_listed_file;
use super::reader::{FileContext, Item, RecordReader};
use crate::sources::SourceError;

/// The most rows decoded at once.
const MAX_ARROW_BATCH_ROWS: usize = 8 * 1024;

/// Reads a Parquet file row by row.
pub(crate) struct ParquetReader {
    ctx: FileContext,
    batches: ParquetRecordBatchReader,
    /// Rows converted but not yet handed out.
    pending: VecDeque<Map<String, Value>>,
    /// Rows handed out so far (the 0-based index of the next row).
    next_row: u64,
    /// Rows in the file.
    total_rows: u64,
    /// The file's size in bytes.
    file_size: u64,
    done: bool,
}

impl ParquetReader {
    /// Open the Parquet file at `path`, reading `batch_rows` rows at a time.
    pub(crate) fn open(
        ctx: FileContext,
        path: &Path,
        file_size: u64,
        batch_rows: usize,
    ) -> Result<Self, SourceError> {
        let file = open_listed_file(path, &ctx.uri)?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|error| parquet_error(&ctx, &error))?;
        let total_rows = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
        let batches = builder
            .with_batch_size(batch_rows.clamp(1, MAX_ARROW_BATCH_ROWS))
            .build()
            .map_err(|error| parquet_error(&ctx, &error))?;
        Ok(ParquetReader {
            ctx,
            batches,
            pending: VecDeque::new(),
            next_row: 0,
            total_rows,
            file_size,
            done: false,
        })
    }

    /// Convert the next Arrow batch into pending rows; false at the end of the file.
    fn fill(&mut self) -> Result<bool, SourceError> {
        match self.batches.next() {
            None => Ok(false),
            Some(Err(error)) => Err(parquet_error(&self.ctx, &error)),
            Some(Ok(batch)) => {
                let rows = batch_to_json(&batch).map_err(|message| SourceError::Parquet {
                    path: self.ctx.uri.clone(),
                    message,
                })?;
                self.pending.extend(rows);
                Ok(true)
            }
        }
    }
}

impl RecordReader for ParquetReader {
    fn next_item(&mut self) -> Result<Option<Item>, SourceError> {
        while self.pending.is_empty() {
            if self.done {
                return Ok(None);
            }
            if !self.fill()? {
                self.done = true;
            }
        }
        let Some(value) = self.pending.pop_front() else {
            return Ok(None);
        };
        self.next_row += 1;
        Ok(Some(self.ctx.record(value, self.next_row, self.next_row)))
    }

    fn consumed(&self) -> u64 {
        if self.total_rows == 0 {
            return 0;
        }
        let share = u128::from(self.file_size) * u128::from(self.next_row.min(self.total_rows))
            / u128::from(self.total_rows);
        u64::try_from(share).unwrap_or(self.file_size)
    }
}

fn parquet_error(ctx: &FileContext, error: &dyn std::fmt::Display) -> SourceError {
    SourceError::Parquet {
        path: ctx.uri.clone(),
        message: crate::sources::error::lower_first(&error.to_string()),
    }
}

/// The rows of `batch` as JSON objects, in order.
pub(crate) fn batch_to_json(batch: &RecordBatch) -> Result<Vec<Map<String, Value>>, String> {
    let mut writer = WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, LineDelimited>(Vec::new());
    writer
        .write(batch)
        .and_then(|()| writer.finish())
        .map_err(|error| format!("cannot convert rows to JSON: {error}"))?;
    let text = writer.into_inner();
    let mut rows = Vec::with_capacity(batch.num_rows());
    for line in text.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        let row = serde_json::from_slice::<Map<String, Value>>(line)
            .map_err(|error| format!("cannot convert rows to JSON: {error}"))?;
        rows.push(row);
    }
    if rows.len() != batch.num_rows() {
        return Err(format!(
            "converted {} rows to JSON but the batch has {}",
            rows.len(),
            batch.num_rows()
        ));
    }
    Ok(rows)
}
