//! JSON lines: one JSON object per `\n`-terminated line.

use std::io::{BufRead, ErrorKind};
use std::sync::atomic::Ordering;

use super::compression::{Compression, InputStream, stream_error};
use super::detect::UTF8_BOM;
use super::reader::{FileContext, Item, KEPT_PREFIX_BYTES, RecordReader, Resume};
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
            line: Vec::new(),
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

    /// Read the next line into `self.line`. Returns its full length without the `\n`,
    /// whether it was cut for being too long and whether it ended with a `\n`, or `None` at
    /// the end of the stream.
    fn read_line(&mut self) -> Result<Option<(u64, bool, bool)>, SourceError> {
        self.line.clear();
        if self.line.capacity() > LINE_CAPACITY_KEPT {
            self.line = Vec::new();
        }
        let max = self.ctx.max_record_bytes;
        let mut length: u64 = 0;
        let mut too_large = false;
        let mut any = false;
        let mut newline = false;
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
                newline = true;
                break;
            }
        }
        Ok(any.then_some((length, too_large, newline)))
    }
}

impl RecordReader for JsonLinesReader {
    fn next_item(&mut self) -> Result<Option<Item>, SourceError> {
        while !self.done {
            let start = self.offset;
            let Some((length, too_large, newline)) = self.read_line()? else {
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
                self.ctx.unparsed(text, line, start, end)
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
    use super::super::testing::*;
    use super::super::{FileSource, FileSourceOptions};
    use crate::deadletter::FailureCode;
    use crate::sources::Source;
    use proptest::prelude::*;

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
