//! JSON lines: one JSON object per `\n`-terminated line.
//!
//! The stream is read in chunks of [`CHUNK_BYTES`], straight from the decompressed stream
//! into a buffer that each of its lines then shares ([`Bytes`]): a line handed out unparsed
//! is a slice of its chunk, not a copy of its own. Only the start of a line cut by a chunk's
//! end is copied, into the next chunk.

use std::io::{BufRead, Read};
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::compression::{Compression, InputStream, stream_error};
use super::detect::UTF8_BOM;
use super::reader::{FileContext, Item, KEPT_PREFIX_BYTES, RecordReader, Resume};
use crate::sources::SourceError;

/// Bytes read from the stream at a time (more when one line is longer). Lines handed out
/// keep their chunk alive, so this is also about the most a batch's lines hold beyond their
/// own bytes at either end.
const CHUNK_BYTES: usize = 64 * 1024;

/// One line of the stream, as [`JsonLinesReader::read_line`] found it.
enum Line {
    /// A line within the maximum record size: its bytes without the `\n`, and whether the
    /// `\n` was there (the last line of a stream may end without one).
    Whole { text: Bytes, newline: bool },
    /// A line longer than the maximum record size: its full length without the `\n`; the
    /// first [`KEPT_PREFIX_BYTES`] of it are in [`JsonLinesReader::prefix`].
    TooLarge { length: u64 },
}

/// Reads a JSON-lines stream line by line, never holding more than a chunk and its current
/// line (and never more than the maximum record size of a line).
pub(crate) struct JsonLinesReader {
    ctx: FileContext,
    stream: InputStream,
    /// Bytes of the decompressed stream consumed so far.
    offset: u64,
    /// Number of the last line read (1-based).
    line_no: u64,
    /// The chunk read last; `chunk[at..]` is not handed out yet.
    chunk: Bytes,
    at: usize,
    /// The stream had no more bytes when the chunk was read.
    eof: bool,
    /// Bytes read at a time (see [`CHUNK_BYTES`]).
    chunk_bytes: usize,
    /// The kept start of the last line that was too long.
    prefix: Vec<u8>,
    done: bool,
    /// Hand lines out unparsed (see [`super::FileSourceOptions::unparsed_json_lines`]).
    unparsed: bool,
    /// The stream is complete as it is (an S3 object): a last line cut off mid-value is
    /// malformed, never a record still being written.
    complete: bool,
    /// A last line still being written was left for the next pass.
    held_back: bool,
}

impl JsonLinesReader {
    /// Read `stream`, positioned at `start.offset`, as JSON lines numbered on from
    /// `start.records`.
    pub(crate) fn new(ctx: FileContext, stream: InputStream, start: Resume) -> Self {
        JsonLinesReader {
            ctx,
            stream,
            offset: start.offset,
            line_no: start.records,
            chunk: Bytes::new(),
            at: 0,
            eof: false,
            chunk_bytes: CHUNK_BYTES,
            prefix: Vec::new(),
            done: false,
            unparsed: false,
            complete: false,
            held_back: false,
        }
    }

    /// Treat the stream as complete (an immutable object): a last line without its `\n`
    /// is read as it is, never held back for a writer to finish.
    pub(crate) fn complete(mut self, complete: bool) -> Self {
        self.complete = complete;
        self
    }

    /// Hand lines out unparsed, for the caller to parse (or not).
    pub(crate) fn unparsed(mut self, unparsed: bool) -> Self {
        self.unparsed = unparsed;
        self
    }

    /// Read chunks of `bytes` (tests cut lines at every place this way).
    #[cfg(test)]
    fn chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes.max(1);
        self
    }

    /// Read the next chunk: what is left of the current one (the start of a line), then as
    /// much of the stream as fits in a chunk, or in twice what was left when that is more.
    fn refill(&mut self, keep: bool) -> Result<(), SourceError> {
        let rest = if keep {
            &self.chunk[self.at..]
        } else {
            &[][..]
        };
        let capacity = self.chunk_bytes.max(rest.len().saturating_mul(2));
        let mut next = Vec::with_capacity(capacity);
        next.extend_from_slice(rest);
        // Bytes the stream's buffer holds come first; then read around that buffer, straight
        // into the chunk.
        let buffered = self.stream.reader.buffer();
        let take = buffered.len().min(capacity - next.len());
        next.extend_from_slice(&buffered[..take]);
        self.stream.reader.consume(take);
        let room = (capacity - next.len()) as u64;
        let before = next.len();
        if room > 0 {
            self.stream
                .reader
                .get_mut()
                .take(room)
                .read_to_end(&mut next)
                .map_err(|error| stream_error(&self.ctx.uri, self.stream.compression, error))?;
        }
        // `read_to_end` stops short of the room only at the end of the stream.
        self.eof = ((next.len() - before) as u64) < room;
        if self.eof && next.len() < capacity / 4 {
            // The end of a small file: its lines would keep the whole chunk alive (a batch
            // of many small files, each line holding a chunk of its own).
            next.shrink_to_fit();
        }
        self.chunk = Bytes::from(next);
        self.at = 0;
        Ok(())
    }

    /// Hand out `length` bytes of the chunk and the `\n` after them (when `newline`).
    fn take_line(&mut self, length: usize, newline: bool) -> Bytes {
        let text = self.chunk.slice(self.at..self.at + length);
        let taken = length + usize::from(newline);
        self.at += taken;
        self.offset += taken as u64;
        text
    }

    /// Read the next line. `None` at the end of the stream.
    fn read_line(&mut self) -> Result<Option<Line>, SourceError> {
        let max = self.ctx.max_record_bytes;
        loop {
            let rest = &self.chunk[self.at..];
            let found = memchr::memchr(b'\n', rest);
            let length = found.unwrap_or(rest.len());
            if length > max {
                return self.too_large(found).map(Some);
            }
            if let Some(at) = found {
                return Ok(Some(Line::Whole {
                    text: self.take_line(at, true),
                    newline: true,
                }));
            }
            if self.eof {
                if rest.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(Line::Whole {
                    text: self.take_line(length, false),
                    newline: false,
                }));
            }
            self.refill(true)?;
        }
    }

    /// The line at `chunk[at..]` is longer than the maximum record size: keep its start,
    /// skip the rest of it (reading on while no `\n` comes) and say how long it was.
    /// `newline_at` is where its `\n` is in the chunk, if it is there.
    fn too_large(&mut self, mut newline_at: Option<usize>) -> Result<Line, SourceError> {
        self.prefix.clear();
        let mut length = 0u64;
        loop {
            let rest = &self.chunk[self.at..];
            let piece = newline_at.unwrap_or(rest.len());
            let room = KEPT_PREFIX_BYTES.saturating_sub(self.prefix.len());
            self.prefix.extend_from_slice(&rest[..piece.min(room)]);
            length += piece as u64;
            self.at += piece;
            self.offset += piece as u64;
            if newline_at.is_some() {
                self.at += 1;
                self.offset += 1;
                return Ok(Line::TooLarge { length });
            }
            if self.eof {
                return Ok(Line::TooLarge { length });
            }
            self.refill(false)?;
            newline_at = memchr::memchr(b'\n', &self.chunk);
        }
    }
}

impl RecordReader for JsonLinesReader {
    fn next_item(&mut self) -> Result<Option<Item>, SourceError> {
        while !self.done {
            let start = self.offset;
            let Some(line) = self.read_line()? else {
                self.done = true;
                break;
            };
            self.line_no += 1;
            let (line_text, newline) = match line {
                Line::TooLarge { length } => {
                    return Ok(Some(self.ctx.too_large(
                        &self.prefix,
                        length,
                        self.line_no,
                        start,
                    )));
                }
                Line::Whole { text, newline } => (text, newline),
            };
            let mut from = 0;
            if start == 0 && line_text.starts_with(UTF8_BOM) {
                from = UTF8_BOM.len();
            }
            let mut to = line_text.len();
            if line_text[from..].ends_with(b"\r") {
                to -= 1;
            }
            let text = &line_text[from..to];
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            // A last line without its `\n` that stops in the middle of a JSON value is a
            // record still being written: leave it for the next pass (the file stays
            // unfinished at the offset before it) instead of rejecting half a record.
            if !newline
                && !self.complete
                && serde_json::from_slice::<serde::de::IgnoredAny>(text).is_err_and(|e| e.is_eof())
            {
                self.offset = start;
                self.line_no -= 1;
                self.done = true;
                self.held_back = true;
                break;
            }
            let (line, end) = (self.line_no, self.offset);
            return Ok(Some(if self.unparsed {
                // A slice of the line (and so of its chunk), not a copy.
                self.ctx
                    .unparsed(line_text.slice(from..to), line, start, end)
            } else {
                self.ctx.parse_json(text, line, start, end)
            }));
        }
        Ok(None)
    }

    fn consumed(&self) -> u64 {
        match self.stream.compression {
            Compression::None => self.offset,
            Compression::Gzip => self.stream.disk_bytes.load(Ordering::Relaxed),
        }
    }

    fn resume_point(&self) -> Resume {
        Resume {
            offset: self.offset,
            records: self.line_no,
        }
    }

    fn held_back(&self) -> bool {
        self.held_back
    }
}

#[cfg(test)]
mod tests {
    use super::super::compression::{Compression, InputStream};
    use super::super::reader::{FileContext, Item, RecordReader, Resume};
    use super::super::testing::*;
    use super::super::{FileSource, FileSourceOptions};
    use super::JsonLinesReader;
    use crate::deadletter::FailureCode;
    use crate::sources::Source;
    use proptest::prelude::*;

    /// A reader of `text` from its start, with `max_record_bytes`.
    fn reader(text: &[u8], max_record_bytes: usize) -> JsonLinesReader {
        let ctx = FileContext {
            uri: "x.jsonl".into(),
            max_record_bytes,
            max_record_memory: FileSourceOptions::DEFAULT_MAX_RECORD_MEMORY,
            leniency: Default::default(),
        };
        let stream = InputStream::new(
            Box::new(std::io::Cursor::new(text.to_vec())),
            Compression::None,
        );
        JsonLinesReader::new(ctx, stream, Resume::default())
    }

    /// What a reader of `text` read in chunks of `chunk` bytes gives: every item (as debug
    /// text), then where it would resume and whether it held a last line back.
    fn read_in_chunks(
        text: &[u8],
        chunk: usize,
        max_record_bytes: usize,
        unparsed: bool,
        complete: bool,
    ) -> (Vec<String>, Resume, bool) {
        let mut reader = reader(text, max_record_bytes)
            .unparsed(unparsed)
            .complete(complete)
            .chunk_bytes(chunk);
        let mut items = Vec::new();
        while let Some(item) = reader.next_item().unwrap() {
            items.push(format!("{item:?}"));
        }
        (items, reader.resume_point(), reader.held_back())
    }

    #[test]
    fn unparsed_lines_are_slices_of_the_chunk_they_were_read_in() {
        let text = b"{\"a\":1}\n{\"a\":2}\n";
        let mut reader = reader(text, 100).unparsed(true);
        let mut texts = Vec::new();
        while let Some(item) = reader.next_item().unwrap() {
            let Item::Record(record) = item else {
                panic!("{item:?}")
            };
            texts.push(record.unparsed.unwrap().text);
        }
        assert_eq!(texts, [&text[..7], &text[8..15]]);
        // The second line starts in the same buffer, right after the first and its `\n`.
        assert_eq!(texts[0].as_ptr().wrapping_add(8), texts[1].as_ptr());
    }

    const TEXT: &[u8] = b"{\"a\":1}\n{\"a\":2,\"b\":{\"c\":[1,2]}}\n";

    #[test]
    fn plain_and_gzipped_lines_read_the_same() {
        let expected = vec![r#"{"a":1}"#, r#"{"a":2,"b":{"c":[1,2]}}"#];
        let (plain, _) = read_bytes("x.jsonl", TEXT);
        assert_eq!(values(&plain), expected);
        let (gz, _) = read_bytes("x.jsonl.gz", &gzip(TEXT));
        assert_eq!(values(&gz), expected);
        let (ndjson, _) = read_bytes("x.ndjson.gzip", &gzip(TEXT));
        assert_eq!(values(&ndjson), expected);
        // Gzip found by its magic bytes under a misleading name.
        let (magic, _) = read_bytes("x.jsonl", &gzip(TEXT));
        assert_eq!(values(&magic), expected);
        // Positions count decompressed bytes.
        assert_eq!(gz[1].position.offset, TEXT.len() as u64);
        assert_eq!(gz[1].position.record, 2);
    }

    #[test]
    fn concatenated_gzip_members_are_read_in_full() {
        let mut bytes = gzip(b"{\"a\":1}\n");
        bytes.extend(gzip(b"{\"a\":2}\n"));
        let (records, _) = read_bytes("x.jsonl.gz", &bytes);
        assert_eq!(values(&records), vec![r#"{"a":1}"#, r#"{"a":2}"#]);
    }

    #[test]
    fn malformed_lines_become_deadletters_and_reading_goes_on() {
        let text = b"{\"a\":1}\n{\"a\":\n\n{\"a\":3}\n";
        let (records, dead) = read_bytes("x.jsonl", text);
        assert_eq!(values(&records), vec![r#"{"a":1}"#, r#"{"a":3}"#]);
        assert_eq!(records[1].position.record, 4);
        assert_eq!(records[1].position.offset, text.len() as u64);
        assert_eq!(dead.len(), 1);
        let bad = &dead[0];
        assert_eq!(bad.code, FailureCode::Malformed);
        assert_eq!(bad.line, 2);
        assert_eq!(bad.offset, 8);
        assert_eq!(bad.raw, "{\"a\":");
        assert_eq!(bad.source_uri, "x.jsonl");
        assert!(bad.error.contains("EOF"), "{}", bad.error);
    }

    #[test]
    fn a_line_that_is_not_an_object_is_a_deadletter() {
        let (records, dead) = read_bytes("x.jsonl", b"[1,2]\n\"s\"\n{\"ok\":true}");
        assert_eq!(values(&records), vec![r#"{"ok":true}"#]);
        let codes: Vec<_> = dead.iter().map(|d| (d.code, d.line, d.offset)).collect();
        assert_eq!(
            codes,
            vec![
                (FailureCode::NotAnObject, 1, 0),
                (FailureCode::NotAnObject, 2, 6)
            ]
        );
        assert_eq!(dead[0].error, "expected a JSON object, found an array");
    }

    #[test]
    fn crlf_blank_lines_and_a_byte_order_mark_are_tolerated() {
        let text = b"\xEF\xBB\xBF{\"a\":1}\r\n\r\n   \n{\"a\":2}\r\n";
        let (records, dead) = read_bytes("x.jsonl", text);
        assert!(dead.is_empty(), "{dead:?}");
        assert_eq!(values(&records), vec![r#"{"a":1}"#, r#"{"a":2}"#]);
        assert_eq!(records[1].position.record, 4);
        assert_eq!(records[0].position.offset, 12);
    }

    #[test]
    fn an_over_long_line_is_too_large_and_only_its_prefix_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let long = format!("{{\"pad\":\"{}\"}}", "y".repeat(300_000));
        let text = format!("{{\"a\":1}}\n{long}\n{{\"a\":3}}\n");
        write(dir.path(), "x.jsonl", text.as_bytes());
        let (records, dead) = read_all(FileSourceOptions {
            max_record_bytes: 100_000,
            ..options(dir.path(), "x.jsonl")
        })
        .unwrap();
        assert_eq!(values(&records), vec![r#"{"a":1}"#, r#"{"a":3}"#]);
        assert_eq!(dead.len(), 1);
        let big = &dead[0];
        assert_eq!(big.code, FailureCode::TooLarge);
        assert_eq!((big.line, big.offset), (2, 8));
        assert!(big.raw.starts_with("{\"pad\":\"yyy"));
        assert!(big.raw.len() < 70_000, "raw kept {} bytes", big.raw.len());
        assert!(
            big.raw
                .ends_with(&format!("[cut, {} bytes in all]", long.len()))
        );
        assert!(big.error.contains(&long.len().to_string()), "{}", big.error);
    }

    #[test]
    fn the_last_offset_equals_the_file_length() {
        let text: String = (0..100).map(|i| format!("{{\"i\":{i}}}\n")).collect();
        let (records, _) = read_bytes("x.jsonl", text.as_bytes());
        assert_eq!(records.len(), 100);
        assert_eq!(records[99].position.offset, text.len() as u64);
        // Also without a final newline.
        let trimmed = text.trim_end();
        let (records, _) = read_bytes("y.jsonl", trimmed.as_bytes());
        assert_eq!(records[99].position.offset, trimmed.len() as u64);
    }

    #[test]
    fn a_truncated_gzip_stream_is_an_error_naming_the_file() {
        let text: String = (0..5000).map(|i| format!("{{\"i\":{i}}}\n")).collect();
        let mut bytes = gzip(text.as_bytes());
        bytes.truncate(bytes.len() / 2);
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "x.jsonl.gz", &bytes);
        let mut source = FileSource::open(options(dir.path(), "x.jsonl.gz")).unwrap();
        let mut error = None;
        loop {
            match source.next_batch() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let error = error.unwrap();
        assert!(error.to_string().contains("`x.jsonl.gz`"), "{error}");
        assert!(!error.is_retryable());
    }

    /// A JSON-lines text from generated parts: objects, blank lines, bad lines, CRLF.
    fn jsonl_text() -> impl Strategy<Value = String> {
        let line = prop_oneof![
            4 => (0i64..1000, "[a-z ]{0,12}")
                .prop_map(|(n, s)| format!("{{\"n\":{n},\"s\":{}}}", serde_json::json!(s))),
            1 => Just(String::new()),
            1 => Just("{broken".to_owned()),
            1 => Just("42".to_owned()),
            1 => (0i64..10).prop_map(|n| format!("{{\"crlf\":{n}}}\r")),
        ];
        (proptest::collection::vec(line, 1..30), any::<bool>()).prop_map(
            |(lines, final_newline)| {
                let mut text = lines.join("\n");
                if final_newline {
                    text.push('\n');
                }
                text
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]

        #[test]
        fn lines_read_the_same_whatever_the_chunks_cut_them_at(
            text in jsonl_text(),
            bom in any::<bool>(),
            long in proptest::option::of(("[a-z]{30,90}", 0..30usize)),
            chunk in 1..48usize,
            max_record_bytes in 8..60usize,
            unparsed in any::<bool>(),
            complete in any::<bool>(),
        ) {
            // A byte order mark and a line longer than some maximum record sizes, somewhere.
            let mut text = text.into_bytes();
            if let Some((pad, at)) = long {
                let line = format!("{{\"pad\":\"{pad}\"}}\n");
                let at = text.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).nth(at).unwrap_or(0);
                text.splice(at..at, line.into_bytes());
            }
            if bom {
                text.splice(0..0, b"\xEF\xBB\xBF".iter().copied());
            }
            // The whole text in one chunk is the reference.
            let whole = read_in_chunks(&text, 1 << 20, max_record_bytes, unparsed, complete);
            let cut = read_in_chunks(&text, chunk, max_record_bytes, unparsed, complete);
            prop_assert_eq!(cut, whole);
        }

        #[test]
        fn unparsed_lines_parsed_later_give_exactly_the_batches_the_source_gives(
            text in jsonl_text(),
            batch_rows in 1..6usize,
            max_record_bytes in 8..40usize,
        ) {
            // A CSV file after the lines, so that a batch can mix parsed and unparsed records;
            // a small maximum record size adds too-large deadletters between the lines.
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), "x.jsonl", text.as_bytes());
            write(dir.path(), "y.csv", b"n,s\n1,a\n2,b\n");
            let parsed_options = FileSourceOptions {
                batch_rows,
                max_record_bytes,
                ..options(dir.path(), "*")
            };
            let parsed = batches(parsed_options.clone()).unwrap();
            let mut unparsed = batches(FileSourceOptions {
                unparsed_json_lines: true,
                ..parsed_options
            })
            .unwrap();
            for batch in &mut unparsed {
                // In two steps, as sync may do: the odd records first, then the rest.
                batch.parse_unparsed(|index| index % 2 == 1);
                batch.parse_unparsed(|_| true);
            }
            prop_assert_eq!(parsed, unparsed);
        }

        #[test]
        fn resuming_at_any_records_offset_yields_exactly_the_remaining_records(
            text in jsonl_text(),
            gzipped in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let name = if gzipped { "x.jsonl.gz" } else { "x.jsonl" };
            let bytes = if gzipped { gzip(text.as_bytes()) } else { text.clone().into_bytes() };
            write(dir.path(), name, &bytes);
            let (records, _) = read_all(options(dir.path(), name)).unwrap();
            let all = values(&records);
            let mut start = 0u64;
            for (i, record) in records.iter().enumerate() {
                // Re-read from the predecessor's offset: this record and all after it.
                let rest = &text.as_bytes()[usize::try_from(start).unwrap()..];
                write(dir.path(), "rest.jsonl", rest);
                let (again, _) = read_all(options(dir.path(), "rest.jsonl")).unwrap();
                prop_assert_eq!(values(&again), all[i..].to_vec());
                start = record.position.offset;
            }
            let rest = &text.as_bytes()[usize::try_from(start).unwrap()..];
            write(dir.path(), "rest.jsonl", rest);
            let (again, _) = read_all(options(dir.path(), "rest.jsonl")).unwrap();
            prop_assert!(again.is_empty());
        }
    }
}
