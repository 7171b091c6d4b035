//! JSON documents: a stream of JSON values separated by optional whitespace, such as one
//! pretty-printed object, several of them one after the other, or objects run together on one
//! line (`{"a":1}{"a":2}`).
//!
//! A scanner walks the bytes once, tracking nesting depth, strings and escapes, to find where
//! each top-level document ends; only the current document is held (and no more than the
//! maximum record size of it), then parsed on its own. Since documents are delimited by their
//! brackets rather than by their content, a malformed document whose brackets balance
//! (`{"a": }`) costs only its own deadletter and reading resumes after it; one whose brackets
//! do not balance swallows the rest of the file into one deadletter.

use std::io::{BufRead, ErrorKind};
use std::sync::atomic::Ordering;

use super::compression::{Compression, InputStream, stream_error};
use super::reader::{FileContext, Item, KEPT_PREFIX_BYTES, RecordReader, Resume, clipped_raw};
use crate::deadletter::FailureCode;
use crate::sources::SourceError;

/// A document buffer that grew past this is released after its document.
const DOCUMENT_CAPACITY_KEPT: usize = 4 * 1024 * 1024;

/// What the scanner is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between documents.
    Between,
    /// In an object or array.
    Container,
    /// In a top-level string.
    Text,
    /// In a top-level number, literal or stray punctuation: up to whitespace or a bracket.
    Bare,
    /// Nothing more to read.
    Done,
}

/// What feeding one byte gave.
enum Step {
    /// Nothing complete yet; the byte was taken.
    Taken,
    /// A document is complete; whether its last byte was the one fed (else that byte was
    /// not taken and starts what comes next).
    Complete(Item, bool),
}

/// The scanner's state, apart from the input stream.
struct Scanner {
    state: State,
    /// Number of the last document started (1-based).
    number: u64,
    /// The current document's bytes (or the kept prefix of one that is too long).
    document: Vec<u8>,
    /// Offset of the current document's first byte.
    start: u64,
    /// Offset just after the current document's last byte.
    end: u64,
    too_large: bool,
    depth: u64,
    in_string: bool,
    escaped: bool,
}

impl Scanner {
    fn new() -> Scanner {
        Scanner {
            state: State::Between,
            number: 0,
            document: Vec::new(),
            start: 0,
            end: 0,
            too_large: false,
            depth: 0,
            in_string: false,
            escaped: false,
        }
    }

    /// Start a document in `state` at `pos`.
    fn begin(&mut self, state: State, pos: u64) {
        self.state = state;
        self.number += 1;
        self.document.clear();
        if self.document.capacity() > DOCUMENT_CAPACITY_KEPT {
            self.document = Vec::new();
        }
        self.start = pos;
        self.end = pos;
        self.too_large = false;
        self.depth = 0;
        self.in_string = false;
        self.escaped = false;
    }

    /// Add the byte at `pos` to the current document.
    fn push(&mut self, byte: u8, pos: u64, ctx: &FileContext) {
        self.end = pos + 1;
        if self.too_large {
            return;
        }
        if self.document.len() >= ctx.max_record_bytes {
            self.too_large = true;
            self.document.truncate(KEPT_PREFIX_BYTES);
        } else {
            self.document.push(byte);
        }
    }

    /// The current document, finished: a record or a deadletter.
    fn finish(&mut self, ctx: &FileContext) -> Item {
        self.state = State::Between;
        if self.too_large {
            return ctx.too_large(
                &self.document,
                self.end - self.start,
                self.number,
                self.start,
            );
        }
        ctx.parse_json(&self.document, self.number, self.start, self.end)
    }

    /// Track strings and escapes for a string byte; true when it closed the string.
    fn string_byte(&mut self, byte: u8) -> bool {
        if self.escaped {
            self.escaped = false;
        } else if byte == b'\\' {
            self.escaped = true;
        } else if byte == b'"' {
            self.in_string = false;
            return true;
        }
        false
    }

    /// Feed the byte at `pos`.
    fn step(&mut self, byte: u8, pos: u64, ctx: &FileContext) -> Step {
        match self.state {
            State::Between => {
                let bom = pos < 3 && matches!(byte, 0xEF | 0xBB | 0xBF);
                if byte.is_ascii_whitespace() || bom {
                    return Step::Taken;
                }
                match byte {
                    b'{' | b'[' => {
                        self.begin(State::Container, pos);
                        self.depth = 1;
                    }
                    b'"' => {
                        self.begin(State::Text, pos);
                        self.in_string = true;
                    }
                    _ => self.begin(State::Bare, pos),
                }
                self.push(byte, pos, ctx);
                Step::Taken
            }
            State::Container => {
                self.push(byte, pos, ctx);
                if self.in_string {
                    self.string_byte(byte);
                    return Step::Taken;
                }
                match byte {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            return Step::Complete(self.finish(ctx), true);
                        }
                    }
                    _ => {}
                }
                Step::Taken
            }
            State::Text => {
                self.push(byte, pos, ctx);
                if self.string_byte(byte) {
                    return Step::Complete(self.finish(ctx), true);
                }
                Step::Taken
            }
            State::Bare => {
                if byte.is_ascii_whitespace() {
                    return Step::Complete(self.finish(ctx), true);
                }
                if matches!(byte, b'{' | b'[' | b'"') {
                    return Step::Complete(self.finish(ctx), false);
                }
                self.push(byte, pos, ctx);
                Step::Taken
            }
            State::Done => Step::Taken,
        }
    }

    /// The stream ended; whatever is pending becomes the last item.
    fn at_end(&mut self, ctx: &FileContext) -> Option<Item> {
        let state = self.state;
        self.state = State::Done;
        match state {
            State::Between | State::Done => None,
            State::Bare => Some(self.finish(ctx)),
            State::Container | State::Text => {
                if self.too_large {
                    return Some(self.finish(ctx));
                }
                Some(ctx.dead(
                    self.number,
                    self.start,
                    clipped_raw(&self.document, self.end - self.start),
                    "the file ends inside this document".to_owned(),
                    FailureCode::Malformed,
                ))
            }
        }
    }
}

/// Reads a stream of JSON documents one document at a time.
pub(crate) struct JsonDocumentsReader {
    ctx: FileContext,
    stream: InputStream,
    /// Bytes of the decompressed stream consumed so far.
    offset: u64,
    scan: Scanner,
}

impl JsonDocumentsReader {
    /// Read `stream`, positioned at `start.offset` (between documents), as JSON documents
    /// numbered on from `start.records`.
    pub(crate) fn new(ctx: FileContext, stream: InputStream, start: Resume) -> Self {
        let mut scan = Scanner::new();
        scan.number = start.records;
        JsonDocumentsReader {
            ctx,
            stream,
            offset: start.offset,
            scan,
        }
    }
}

impl RecordReader for JsonDocumentsReader {
    fn next_item(&mut self) -> Result<Option<Item>, SourceError> {
        loop {
            if self.scan.state == State::Done {
                return Ok(None);
            }
            let buf = match self.stream.reader.fill_buf() {
                Ok(buf) => buf,
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(stream_error(&self.ctx.uri, self.stream.compression, error));
                }
            };
            if buf.is_empty() {
                return Ok(self.scan.at_end(&self.ctx));
            }
            let mut used = buf.len();
            let mut found = None;
            for (i, &byte) in buf.iter().enumerate() {
                let pos = self.offset + i as u64;
                if let Step::Complete(item, taken) = self.scan.step(byte, pos, &self.ctx) {
                    used = if taken { i + 1 } else { i };
                    found = Some(item);
                    break;
                }
            }
            self.stream.reader.consume(used);
            self.offset += used as u64;
            if found.is_some() {
                return Ok(found);
            }
        }
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
            records: self.scan.number,
        }
    }
}

/// Whether a stream of JSON objects is JSON lines (`true`) or documents (`false`), from its
/// first line: JSON lines when the first value ends on its first line with nothing but
/// whitespace after it. Fed bytes in order from the start of the (decompressed) stream.
#[derive(Debug, Default)]
pub(crate) struct FirstLine {
    /// Bytes fed so far.
    seen: u64,
    started: bool,
    closed: bool,
    depth: u64,
    in_string: bool,
    escaped: bool,
}

impl FirstLine {
    /// Feed the next bytes; `Some` once the answer is known.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Option<bool> {
        for &byte in bytes {
            let pos = self.seen;
            self.seen += 1;
            if !self.started {
                let bom = pos < 3 && matches!(byte, 0xEF | 0xBB | 0xBF);
                if byte.is_ascii_whitespace() || bom {
                    continue;
                }
                self.started = true;
            }
            if self.closed {
                match byte {
                    b'\n' => return Some(true),
                    _ if byte.is_ascii_whitespace() => {}
                    // More on the first line: documents run together.
                    _ => return Some(false),
                }
                continue;
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if byte == b'\\' {
                    self.escaped = true;
                } else if byte == b'"' {
                    self.in_string = false;
                } else if byte == b'\n' {
                    // A raw newline in a string is bad JSON either way; lines recover better.
                    return Some(true);
                }
                continue;
            }
            match byte {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        self.closed = true;
                    }
                }
                // The first value goes on past its first line: a pretty-printed document.
                b'\n' => return Some(false),
                _ => {}
            }
        }
        None
    }

    /// The answer when the stream (or the patience to read it) ended first: JSON lines, whose
    /// only line then holds a record either way.
    pub(crate) fn finish(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{FileFormat, FileSource, FileSourceOptions};
    use super::FirstLine;
    use crate::deadletter::FailureCode;

    fn pretty(value: &serde_json::Value) -> String {
        serde_json::to_string_pretty(value).unwrap()
    }

    fn first_line(text: &str) -> bool {
        let mut sniff = FirstLine::default();
        sniff.feed(text.as_bytes()).unwrap_or(sniff.finish())
    }

    #[test]
    fn a_pretty_printed_json_object_is_one_record_not_a_deadletter_per_line() {
        let value = serde_json::json!({
            "id": 7,
            "name": "braces { ] in a string, and \"quotes\"",
            "tags": ["a", "b"],
            "nested": {"deep": [1, {"x": null}]}
        });
        let text = format!("{}\n", pretty(&value));
        let (records, dead) = read_bytes("x.json", text.as_bytes());
        assert!(dead.is_empty(), "{dead:?}");
        assert_eq!(records.len(), 1);
        assert_eq!(serde_json::Value::Object(records[0].value.clone()), value);
        assert_eq!(records[0].position.record, 1);
        assert_eq!(records[0].position.offset, text.trim_end().len() as u64);
    }

    #[test]
    fn concatenated_documents_are_one_record_each_positioned_just_after_each() {
        let docs: Vec<String> = (1..=3)
            .map(|i| pretty(&serde_json::json!({"i": i, "list": [i, i]})))
            .collect();
        let text = format!("\u{feff}{}\n\n{}  {}", docs[0], docs[1], docs[2]);
        for (name, bytes) in [
            ("x.json", text.clone().into_bytes()),
            ("x.json.gz", gzip(text.as_bytes())),
        ] {
            let (records, dead) = read_bytes(name, &bytes);
            assert!(dead.is_empty(), "{dead:?}");
            let numbers: Vec<u64> = records.iter().map(|r| r.position.record).collect();
            assert_eq!(numbers, vec![1, 2, 3]);
            for record in &records {
                let end = usize::try_from(record.position.offset).unwrap();
                assert_eq!(&text[end - 1..end], "}");
            }
            assert_eq!(records[2].position.offset, text.len() as u64);
            assert_eq!(records[1].value["i"], 2);
        }
        // Documents run together on one line.
        let (records, dead) = read_bytes("x.json", br#"{"a":1}{"a":2} {"a":3}"#);
        assert!(dead.is_empty(), "{dead:?}");
        assert_eq!(
            values(&records),
            vec![r#"{"a":1}"#, r#"{"a":2}"#, r#"{"a":3}"#]
        );
        assert_eq!(records[0].position.offset, 7);
    }

    #[test]
    fn resuming_at_a_documents_offset_yields_exactly_the_remaining_documents() {
        let text = "{\n \"a\": 1\n}\n{\n \"a\": \"}\"\n}{\"a\":3}\n[\n1\n]\n{\n \"a\": 4\n}\n";
        let (records, dead) = read_bytes("x.json", text.as_bytes());
        assert_eq!(dead.len(), 1);
        let all = values(&records);
        assert_eq!(all.len(), 4);
        let dir = tempfile::tempdir().unwrap();
        for (i, record) in records.iter().enumerate() {
            let rest = &text[usize::try_from(record.position.offset).unwrap()..];
            write(dir.path(), "rest.json", rest.as_bytes());
            let (again, _) = read_all(FileSourceOptions {
                format: Some(FileFormat::JsonDocuments),
                ..options(dir.path(), "rest.json")
            })
            .unwrap();
            assert_eq!(values(&again), all[i + 1..].to_vec());
        }
    }

    #[test]
    fn a_malformed_document_is_one_deadletter_and_reading_resumes_after_it() {
        let text = "{\n  \"a\": 1\n}\n{\n  \"b\": ,\n}\n{\n  \"c\": 3\n}\n";
        let (records, dead) = read_bytes("x.json", text.as_bytes());
        assert_eq!(values(&records), vec![r#"{"a":1}"#, r#"{"c":3}"#]);
        assert_eq!(records[1].position.record, 3);
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].code, FailureCode::Malformed);
        assert_eq!(dead[0].line, 2);
        assert_eq!(dead[0].offset, 13);
        assert_eq!(dead[0].raw, "{\n  \"b\": ,\n}");
    }

    #[test]
    fn values_that_are_not_objects_between_documents_are_deadletters() {
        let (records, dead) = read_bytes("x.json", b"{\"a\":1} 42\n\"s\" true,{\"b\":2}\n");
        assert_eq!(values(&records), vec![r#"{"a":1}"#, r#"{"b":2}"#]);
        assert_eq!(records[1].position.record, 5);
        let summary: Vec<_> = dead
            .iter()
            .map(|d| (d.code, d.line, d.raw.as_str()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (FailureCode::NotAnObject, 2, "42"),
                (FailureCode::NotAnObject, 3, "\"s\""),
                (FailureCode::Malformed, 4, "true,"),
            ]
        );
    }

    #[test]
    fn a_document_cut_off_by_the_end_of_the_file_is_a_deadletter() {
        let text = "{\n  \"a\": 1\n}\n{\n  \"a\": \"cut";
        let (records, dead) = read_bytes("x.json", text.as_bytes());
        assert_eq!(values(&records), vec![r#"{"a":1}"#]);
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].code, FailureCode::Malformed);
        assert_eq!((dead[0].line, dead[0].offset), (2, 13));
        assert_eq!(dead[0].error, "the file ends inside this document");
    }

    #[test]
    fn an_over_long_document_is_too_large_and_the_next_one_still_arrives() {
        let dir = tempfile::tempdir().unwrap();
        let long = format!(
            "{{\n \"pad\": \"{}\",\n \"n\": [[{{}}]]\n}}",
            "z".repeat(5000)
        );
        let text = format!("{long}\n{{\n \"ok\": 1\n}}\n");
        write(dir.path(), "x.json", text.as_bytes());
        let (records, dead) = read_all(FileSourceOptions {
            max_record_bytes: 1000,
            ..options(dir.path(), "x.json")
        })
        .unwrap();
        assert_eq!(values(&records), vec![r#"{"ok":1}"#]);
        assert_eq!(records[0].position.record, 2);
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].code, FailureCode::TooLarge);
        assert!(
            dead[0].error.contains(&long.len().to_string()),
            "{}",
            dead[0].error
        );
    }

    #[test]
    fn a_json_file_whose_first_line_is_a_complete_value_is_still_json_lines() {
        let text = b"{\"a\":1}  \r\n{\"a\":\n{\"a\":3}\n";
        let (records, dead) = read_bytes("x.json", text);
        assert_eq!(values(&records), vec![r#"{"a":1}"#, r#"{"a":3}"#]);
        assert_eq!(records[1].position.record, 3);
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].line, 2);
    }

    #[test]
    fn the_first_line_tells_json_lines_from_documents() {
        assert!(first_line("{\"a\":1}\n{\"a\":2}\n"));
        assert!(first_line("\n\n  {\"a\":\"}\\\"{\"}  \n"));
        assert!(first_line("{\"a\":1}"));
        assert!(first_line("{\"a\":\"raw\nnewline\"}\n"));
        assert!(!first_line("{\n  \"a\": 1\n}\n"));
        assert!(!first_line("{\"a\":1}{\"a\":2}\n"));
        assert!(!first_line("{\"a\":1} 42\n"));
        // Undecided until the first line ends.
        let mut sniff = FirstLine::default();
        assert_eq!(sniff.feed(b"{\"a\": [1, 2"), None);
        assert_eq!(sniff.feed(b"]} \n"), Some(true));
    }

    #[test]
    fn formats_report_lines_or_documents_for_json_files() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "d/a.json", b"{\n \"a\": 1\n}\n");
        // A first line longer than the head read for detection.
        let long = format!("{{\"pad\":\"{}\"}}\n{{\"a\":2}}\n", "p".repeat(20_000));
        write(dir.path(), "d/b.json", long.as_bytes());
        write(dir.path(), "d/c.json", b"[{\"a\":3}]");
        write(dir.path(), "d/d.txt", b"{\n \"a\": 4\n}");
        write(dir.path(), "d/e.jsonl", b"{\n \"a\": 5\n}");
        let source = FileSource::open(options(dir.path(), "d")).unwrap();
        let formats: Vec<FileFormat> = source.formats().map(|(format, _)| format).collect();
        assert_eq!(
            formats,
            vec![
                FileFormat::JsonDocuments,
                FileFormat::Jsonl,
                FileFormat::JsonArray,
                FileFormat::JsonDocuments,
                // An explicit JSON-lines name is taken at its word.
                FileFormat::Jsonl,
            ]
        );
    }
}
