//! CSV with a header row: each row becomes an object keyed by the header's names, with cells
//! typed by [`type_cell`].

use std::collections::HashSet;
use std::io::{self, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Number, Value};

use super::compression::{Compression, InputStream, stream_error};
use super::reader::{FileContext, Item, RecordReader, raw_text};
use crate::deadletter::FailureCode;
use crate::sources::SourceError;
use crate::sources::error::lower_first;

/// The CSV parser's own buffer; also the slack allowed past the maximum record size.
const CSV_BUFFER_BYTES: usize = 64 * 1024;

/// Type one CSV cell: empty is null, `true`/`false` (any case) a boolean, a canonical integer
/// that fits `i64` an integer, a canonical decimal a float; anything else stays a string.
///
/// Canonical means an optional `-`, digits without leading zeros (a lone `0` is fine) and, for
/// decimals, a `.` followed by digits and/or an exponent (`1.5`, `-0.25`, `2e10`, `1.5E-3`). So
/// `007`, `+1`, `1.`, `.5`, ` 42` and `12,5` stay strings, as does `-0`.
pub fn type_cell(cell: &str) -> Value {
    if cell.is_empty() {
        return Value::Null;
    }
    if cell.eq_ignore_ascii_case("true") {
        return Value::Bool(true);
    }
    if cell.eq_ignore_ascii_case("false") {
        return Value::Bool(false);
    }
    match number_shape(cell) {
        Some(NumberShape::Integer) => match cell.parse::<i64>() {
            Ok(n) => Value::Number(n.into()),
            Err(_) => Value::String(cell.to_owned()),
        },
        Some(NumberShape::Decimal) => match cell.parse::<f64>().ok().and_then(Number::from_f64) {
            Some(n) => Value::Number(n),
            None => Value::String(cell.to_owned()),
        },
        None => Value::String(cell.to_owned()),
    }
}

/// What kind of canonical number a cell spells, if any.
#[derive(Debug, PartialEq, Eq)]
enum NumberShape {
    Integer,
    Decimal,
}

fn number_shape(cell: &str) -> Option<NumberShape> {
    let bytes = cell.as_bytes();
    let unsigned = bytes.strip_prefix(b"-").unwrap_or(bytes);
    let int_len = unsigned.iter().take_while(|b| b.is_ascii_digit()).count();
    if int_len == 0 || (int_len > 1 && unsigned[0] == b'0') {
        return None;
    }
    let mut rest = &unsigned[int_len..];
    if rest.is_empty() {
        // `-0` would lose its sign as a number.
        return (unsigned != b"0" || bytes.len() == 1).then_some(NumberShape::Integer);
    }
    if let Some(after_dot) = rest.strip_prefix(b".") {
        let frac_len = after_dot.iter().take_while(|b| b.is_ascii_digit()).count();
        if frac_len == 0 {
            return None;
        }
        rest = &after_dot[frac_len..];
    }
    if let Some(after_e) = rest.strip_prefix(b"e").or_else(|| rest.strip_prefix(b"E")) {
        let digits = after_e
            .strip_prefix(b"+")
            .or_else(|| after_e.strip_prefix(b"-"))
            .unwrap_or(after_e);
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        rest = &[];
    }
    rest.is_empty().then_some(NumberShape::Decimal)
}

/// Make header names usable as keys: empty names become `column_<n>` (1-based), repeats get
/// `_2`, `_3`, ... Returns the names and whether any had to change.
pub(crate) fn unique_headers(raw: &[String]) -> (Vec<String>, bool) {
    let originals: HashSet<&str> = raw
        .iter()
        .map(String::as_str)
        .filter(|n| !n.is_empty())
        .collect();
    let mut used: HashSet<String> = HashSet::with_capacity(raw.len());
    let mut changed = false;
    let mut names = Vec::with_capacity(raw.len());
    for (index, name) in raw.iter().enumerate() {
        let base = if name.is_empty() {
            format!("column_{}", index + 1)
        } else {
            name.clone()
        };
        let mut candidate = base.clone();
        let mut n = 2;
        // A made-up name must not take a name that appears in the header.
        while used.contains(&candidate)
            || (candidate != *name && originals.contains(candidate.as_str()))
        {
            candidate = format!("{base}_{n}");
            n += 1;
        }
        changed |= candidate != *name;
        used.insert(candidate.clone());
        names.push(candidate);
    }
    (names, changed)
}

/// Hands the CSV parser its input and refuses to go on once one record has run past the
/// maximum size, so a runaway quoted field cannot eat memory.
struct LimitedInput {
    inner: BufReader<Box<dyn Read + Send>>,
    /// Bytes handed to the parser so far.
    given: u64,
    /// Where the record being parsed starts.
    record_start: Arc<AtomicU64>,
    /// Bytes the parser may take past `record_start`.
    limit: u64,
}

/// The marker inside the I/O error [`LimitedInput`] raises.
#[derive(Debug)]
struct RecordTooLarge;

impl std::fmt::Display for RecordTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("record too large")
    }
}

impl std::error::Error for RecordTooLarge {}

impl Read for LimitedInput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let start = self.record_start.load(Ordering::Relaxed);
        if self.given.saturating_sub(start) > self.limit {
            return Err(io::Error::other(RecordTooLarge));
        }
        let n = self.inner.read(buf)?;
        self.given += n as u64;
        Ok(n)
    }
}

/// Reads a CSV stream row by row.
pub(crate) struct CsvReader {
    ctx: FileContext,
    reader: csv::Reader<LimitedInput>,
    record_start: Arc<AtomicU64>,
    disk_bytes: Arc<AtomicU64>,
    compression: Compression,
    headers: Option<Vec<String>>,
    row: csv::ByteRecord,
    done: bool,
}

impl CsvReader {
    /// Read `stream` as CSV with a header row.
    pub(crate) fn new(ctx: FileContext, stream: InputStream) -> Self {
        let record_start = Arc::new(AtomicU64::new(0));
        let input = LimitedInput {
            inner: stream.reader,
            given: 0,
            record_start: Arc::clone(&record_start),
            limit: ctx.max_record_bytes as u64 + CSV_BUFFER_BYTES as u64,
        };
        let reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(true)
            .buffer_capacity(CSV_BUFFER_BYTES)
            .from_reader(input);
        CsvReader {
            ctx,
            reader,
            record_start,
            disk_bytes: stream.disk_bytes,
            compression: stream.compression,
            headers: None,
            row: csv::ByteRecord::new(),
            done: false,
        }
    }

    /// Turn a parser error into an item (a record too large) or a [`SourceError`].
    fn fail(&mut self, error: csv::Error) -> Result<Option<Item>, SourceError> {
        self.done = true;
        let line = self.reader.position().line();
        let message = lower_first(&error.to_string());
        match error.into_kind() {
            csv::ErrorKind::Io(io_error) => {
                if io_error
                    .get_ref()
                    .is_some_and(|inner| inner.is::<RecordTooLarge>())
                {
                    tracing::warn!(
                        file = %self.ctx.uri,
                        line,
                        "a CSV record is longer than the maximum record size; the rest of the file is skipped"
                    );
                    let start = self.record_start.load(Ordering::Relaxed);
                    let item = self.ctx.dead(
                        line,
                        start,
                        String::new(),
                        format!(
                            "record is more than the maximum of {} bytes (an unclosed quote?); the rest of the file was skipped",
                            self.ctx.max_record_bytes
                        ),
                        FailureCode::TooLarge,
                    );
                    return Ok(Some(item));
                }
                Err(stream_error(&self.ctx.uri, self.compression, io_error))
            }
            _ => Err(SourceError::Csv {
                path: self.ctx.uri.clone(),
                line,
                message,
            }),
        }
    }

    /// Read the header row, once.
    fn read_headers(&mut self) -> Result<Option<Item>, SourceError> {
        let raw: Vec<String> = match self.reader.byte_headers() {
            Ok(headers) => headers
                .iter()
                .map(|name| String::from_utf8_lossy(name).into_owned())
                .collect(),
            Err(error) => return self.fail(error),
        };
        let (names, changed) = unique_headers(&raw);
        if changed {
            tracing::warn!(
                file = %self.ctx.uri,
                columns = ?names,
                "CSV header has empty or repeated names; renamed them"
            );
        }
        self.headers = Some(names);
        self.record_start
            .store(self.reader.position().byte(), Ordering::Relaxed);
        Ok(None)
    }
}

impl RecordReader for CsvReader {
    fn next_item(&mut self) -> Result<Option<Item>, SourceError> {
        if self.done {
            return Ok(None);
        }
        if self.headers.is_none() {
            if let Some(item) = self.read_headers()? {
                return Ok(Some(item));
            }
        }
        let more = match self.reader.read_byte_record(&mut self.row) {
            Ok(more) => more,
            Err(error) => return self.fail(error),
        };
        if !more {
            self.done = true;
            return Ok(None);
        }
        let end = self.reader.position().byte();
        self.record_start.store(end, Ordering::Relaxed);
        let (start, line) = self.row.position().map_or((0, 0), |p| (p.byte(), p.line()));
        let headers = self.headers.as_deref().unwrap_or_default();
        if self.row.len() != headers.len() {
            let raw = raw_row(&self.row);
            return Ok(Some(self.ctx.dead(
                line,
                start,
                raw,
                format!(
                    "row has {} fields but the header has {}",
                    self.row.len(),
                    headers.len()
                ),
                FailureCode::Malformed,
            )));
        }
        let mut value = Map::with_capacity(headers.len());
        for (name, cell) in headers.iter().zip(self.row.iter()) {
            match std::str::from_utf8(cell) {
                Ok(text) => {
                    value.insert(name.clone(), type_cell(text));
                }
                Err(_) => {
                    let raw = raw_row(&self.row);
                    return Ok(Some(self.ctx.dead(
                        line,
                        start,
                        raw,
                        format!("invalid UTF-8 in column `{name}`"),
                        FailureCode::Malformed,
                    )));
                }
            }
        }
        Ok(Some(self.ctx.record(value, end, line)))
    }

    fn consumed(&self) -> u64 {
        match self.compression {
            Compression::None => self.reader.position().byte(),
            Compression::Gzip => self.disk_bytes.load(Ordering::Relaxed),
        }
    }
}

/// A row written back as CSV text, for a deadletter.
fn raw_row(row: &csv::ByteRecord) -> String {
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    let bytes = match writer.write_byte_record(row) {
        Ok(()) => writer.into_inner().unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    raw_text(bytes)
}
