//! JSON lines: one JSON object per `\n`-terminated line.

use std::io::{BufRead, ErrorKind};
use std::sync::atomic::Ordering;

use super::compression::{Compression, InputStream, stream_error};
use super::detect::UTF8_BOM;
use super::reader::{FileContext, Item, KEPT_PREFIX_BYTES, RecordReader};
use crate::sources::SourceError;

/// A line buffer that grew past this is released after its record.
const LINE_CAPACITY_KEPT: usize = 4 * 1024 * 1024;

/// Reads a JSON-lines stream line by line, never holding more than one line (and never more
/// than the maximum record size of it).
pub(crate) struct JsonLinesReader {
    ctx: FileContext,
    stream: InputStream,
    /// Bytes of the decompressed stream consumed so far.
    offset: u64,
    /// Number of the last line read (1-based).
    line_no: u64,
    /// The current line's bytes (or the kept prefix of a line that is too long).
    line: Vec<u8>,
    done: bool,
}

impl JsonLinesReader {
    /// Read `stream` as JSON lines.
    pub(crate) fn new(ctx: FileContext, stream: InputStream) -> Self {
        JsonLinesReader {
            ctx,
            stream,
            offset: 0,
            line_no: 0,
            line: Vec::new(),
            done: false,
        }
    }

    /// Read the next line into `self.line`. Returns its full length without the `\n` and
    /// whether it was cut for being too long, or `None` at the end of the stream.
    fn read_line(&mut self) -> Result<Option<(u64, bool)>, SourceError> {
        self.line.clear();
        if self.line.capacity() > LINE_CAPACITY_KEPT {
            self.line = Vec::new();
        }
        let max = self.ctx.max_record_bytes;
        let mut length: u64 = 0;
        let mut too_large = false;
        let mut any = false;
        loop {
            let buf = match self.stream.reader.fill_buf() {
                Ok(buf) => buf,
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(stream_error(&self.ctx.uri, self.stream.compression, error));
                }
            };
            if buf.is_empty() {
                break;
            }
            any = true;
            let (content, taken, ended) = match memchr::memchr(b'\n', buf) {
                Some(at) => (&buf[..at], at + 1, true),
                None => (buf, buf.len(), false),
            };
            length += content.len() as u64;
            if !too_large {
                if self.line.len() + content.len() > max {
                    too_large = true;
                    let room = KEPT_PREFIX_BYTES.saturating_sub(self.line.len());
                    self.line
                        .extend_from_slice(&content[..room.min(content.len())]);
                    self.line.truncate(KEPT_PREFIX_BYTES);
                } else {
                    self.line.extend_from_slice(content);
                }
            }
            self.stream.reader.consume(taken);
            self.offset += taken as u64;
            if ended {
                break;
            }
        }
        Ok(any.then_some((length, too_large)))
    }
}

impl RecordReader for JsonLinesReader {
    fn next_item(&mut self) -> Result<Option<Item>, SourceError> {
        while !self.done {
            let start = self.offset;
            let Some((length, too_large)) = self.read_line()? else {
                self.done = true;
                break;
            };
            self.line_no += 1;
            if too_large {
                return Ok(Some(self.ctx.too_large(
                    &self.line,
                    length,
                    self.line_no,
                    start,
                )));
            }
            let mut text = self.line.as_slice();
            if start == 0 {
                text = text.strip_prefix(UTF8_BOM).unwrap_or(text);
            }
            text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(self.ctx.parse_json(
                text,
                self.line_no,
                start,
                self.offset,
            )));
        }
        Ok(None)
    }

    fn consumed(&self) -> u64 {
        match self.stream.compression {
            Compression::None => self.offset,
            Compression::Gzip => self.stream.disk_bytes.load(Ordering::Relaxed),
        }
    }
}
