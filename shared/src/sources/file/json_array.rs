//! JSON arrays: a file holding one array of objects, read one element at a time.
//!
//! A small scanner walks the bytes once, tracking nesting depth, strings and escapes, to find
//! each top-level element's span; only the current element is held (and no more than the
//! maximum record size of it), then parsed on its own with serde_json.

use std::io::{BufRead, ErrorKind};
use std::sync::atomic::Ordering;

use super::compression::{Compression, InputStream, stream_error};
use super::reader::{FileContext, Item, KEPT_PREFIX_BYTES, RecordReader, Resume, clipped_raw};
use crate::deadletter::FailureCode;
use crate::sources::SourceError;

/// An element buffer that grew past this is released after its element.
const ELEMENT_CAPACITY_KEPT: usize = 4 * 1024 * 1024;

/// Where the scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening `[`.
    Start,
    /// After `[` or `,`, before an element.
    BeforeElement {
        /// Whether a comma came just before (so `]` here is a trailing comma).
        after_comma: bool,
    },
    /// Inside an element.
    InElement,
    /// After the closing `]`.
    AfterArray,
    /// After the closing `]`, in data that should not be there.
    Trailing,
    /// Nothing more to read.
    Done,
}

/// The scanner's state, apart from the input stream.
struct Scanner {
    state: State,
    /// Number of the last element started (1-based).
    element_no: u64,
    /// The current element's bytes (or the kept prefix of one that is too long).
    element: Vec<u8>,
    /// Offset of the current element's first byte.
    start: u64,
    /// Offset just after the current element's last non-whitespace byte.
    end: u64,
    too_large: bool,
    depth: u64,
    in_string: bool,
    escaped: bool,
    /// Whether the array was left without its closing `]` (warned once).
    warned_unclosed: bool,
}

/// Reads a JSON array stream element by element.
pub(crate) struct JsonArrayReader {
    ctx: FileContext,
    stream: InputStream,
    /// Bytes of the decompressed stream consumed so far.
    offset: u64,
    scan: Scanner,
}

impl JsonArrayReader {
    /// Read `stream`, positioned at `start.offset`, as a JSON array whose elements are numbered
    /// on from `start.records`. `last` is the byte just before `start.offset`, which tells
    /// where a resumed scanner is: every item ends on the `,` or `]` after its element, or
    /// (with no element started) on a bad first byte after which nothing more is read.
    pub(crate) fn new(
        ctx: FileContext,
        stream: InputStream,
        start: Resume,
        last: Option<u8>,
    ) -> Self {
        let state = match last {
            None => State::Start,
            Some(_) if start.records == 0 => State::Done,
            Some(b',') => State::BeforeElement { after_comma: true },
            Some(b'[') => State::BeforeElement { after_comma: false },
            Some(b']') => State::AfterArray,
            Some(_) => State::Done,
        };
        JsonArrayReader {
            ctx,
            stream,
            offset: start.offset,
            scan: Scanner {
                state,
                element_no: start.records,
                element: Vec::new(),
                start: 0,
                end: 0,
                too_large: false,
                depth: 0,
                in_string: false,
                escaped: false,
                warned_unclosed: false,
            },
        }
    }
}

impl Scanner {
    /// Start a new element at `pos`.
    fn begin(&mut self, pos: u64) {
        self.state = State::InElement;
        self.element_no += 1;
        self.element.clear();
        if self.element.capacity() > ELEMENT_CAPACITY_KEPT {
            self.element = Vec::new();
        }
        self.start = pos;
        self.end = pos;
        self.too_large = false;
        self.depth = 0;
        self.in_string = false;
        self.escaped = false;
    }

    /// Add a byte at `pos` to the current element.
    fn push(&mut self, byte: u8, pos: u64, ctx: &FileContext) {
        if !byte.is_ascii_whitespace() || self.in_string {
            self.end = pos + 1;
        }
        if self.too_large {
            return;
        }
        if self.element.len() >= ctx.max_record_bytes {
            self.too_large = true;
            self.element.truncate(KEPT_PREFIX_BYTES);
        } else {
            self.element.push(byte);
        }
    }

    /// The current element, finished: a record or a deadletter.
    fn finish(&mut self, ctx: &FileContext) -> Item {
        if self.too_large {
            return ctx.too_large(
                &self.element,
                self.end - self.start,
                self.element_no,
                self.start,
            );
        }
        ctx.parse_json(&self.element, self.element_no, self.start, self.end)
    }

    /// Feed the byte at `pos`; returns an item when one is complete.
    fn step(&mut self, byte: u8, pos: u64, ctx: &FileContext) -> Option<Item> {
        match self.state {
            State::Start => {
                if byte.is_ascii_whitespace() || (pos < 3 && matches!(byte, 0xEF | 0xBB | 0xBF)) {
                    return None;
                }
                if byte == b'[' {
                    self.state = State::BeforeElement { after_comma: false };
                    return None;
                }
                self.state = State::Done;
                Some(ctx.dead(
                    1,
                    pos,
                    String::new(),
                    format!(
                        "expected `[` to open a JSON array, found `{}`",
                        char::from(byte).escape_default()
                    ),
                    FailureCode::Malformed,
                ))
            }
            State::BeforeElement { after_comma } => {
                if byte.is_ascii_whitespace() {
                    return None;
                }
                match byte {
                    b']' => {
                        if after_comma {
                            tracing::warn!(file = %ctx.uri, "trailing comma before `]` ignored");
                        }
                        self.state = State::AfterArray;
                        None
                    }
                    b',' => {
                        self.element_no += 1;
                        Some(ctx.dead(
                            self.element_no,
                            pos,
                            String::new(),
                            "empty array element".to_owned(),
                            FailureCode::Malformed,
                        ))
                    }
                    _ => {
                        self.begin(pos);
                        self.step(byte, pos, ctx)
                    }
                }
            }
            State::InElement => {
                if self.in_string {
                    if self.escaped {
                        self.escaped = false;
                    } else if byte == b'\\' {
                        self.escaped = true;
                    } else if byte == b'"' {
                        self.in_string = false;
                    }
                    self.push(byte, pos, ctx);
                    return None;
                }
                match byte {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b',' if self.depth == 0 => {
                        self.state = State::BeforeElement { after_comma: true };
                        return Some(self.finish(ctx));
                    }
                    b']' if self.depth == 0 => {
                        self.state = State::AfterArray;
                        return Some(self.finish(ctx));
                    }
                    b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                    _ => {}
                }
                self.push(byte, pos, ctx);
                None
            }
            State::AfterArray => {
                if byte.is_ascii_whitespace() {
                    return None;
                }
                self.state = State::Trailing;
                self.begin(pos);
                self.state = State::Trailing;
                self.push(byte, pos, ctx);
                None
            }
            State::Trailing => {
                if !byte.is_ascii_whitespace() {
                    self.end = pos + 1;
                }
                if self.element.len() < KEPT_PREFIX_BYTES {
                    self.element.push(byte);
                }
                None
            }
            State::Done => None,
        }
    }

    /// The stream ended; whatever is pending becomes the last item.
    fn at_end(&mut self, ctx: &FileContext) -> Option<Item> {
        let state = self.state;
        self.state = State::Done;
        match state {
            State::Start | State::AfterArray | State::Done => None,
            State::BeforeElement { .. } => {
                self.warn_unclosed(ctx);
                None
            }
            State::InElement => {
                self.warn_unclosed(ctx);
                if self.too_large || self.depth > 0 || self.in_string {
                    return Some(ctx.dead(
                        self.element_no,
                        self.start,
                        clipped_raw(&self.element, self.end - self.start),
                        "the file ends inside this element".to_owned(),
                        FailureCode::Malformed,
                    ));
                }
                Some(self.finish(ctx))
            }
            State::Trailing => Some(ctx.dead(
                self.element_no,
                self.start,
                clipped_raw(self.element.trim_ascii_end(), self.end - self.start),
                "unexpected data after the end of the array".to_owned(),
                FailureCode::Malformed,
            )),
        }
    }

    fn warn_unclosed(&mut self, ctx: &FileContext) {
        if !self.warned_unclosed {
            self.warned_unclosed = true;
            tracing::warn!(file = %ctx.uri, "the JSON array is not closed: the file ends before `]`");
        }
    }
}

impl RecordReader for JsonArrayReader {
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
                if let Some(item) = self.scan.step(byte, self.offset + i as u64, &self.ctx) {
                    used = i + 1;
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
            records: self.scan.element_no,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{FileFormat, FileSource, FileSourceOptions};
    use crate::deadletter::FailureCode;

    const TRICKY: &str = r#"[
  {"id": 1, "s": "brackets ] } [ { and a comma, here", "nested": {"deep": [1, {"x": "]"}]}},
  {"id": 2, "q": "escaped \" quote, then \\", "e": "\\\"]"},
  {"id": 3, "u": "\u005d unicode", "empty": {}, "list": []}
]
"#;

    #[test]
    fn elements_with_nested_objects_and_tricky_strings_are_split_correctly() {
        let (records, dead) = read_bytes("x.json", TRICKY.as_bytes());
        assert!(dead.is_empty(), "{dead:?}");
        assert_eq!(records.len(), 3);
        assert_eq!(
            records[0].value["s"],
            serde_json::json!("brackets ] } [ { and a comma, here")
        );
        assert_eq!(records[0].value["nested"]["deep"][1]["x"], "]");
        assert_eq!(records[1].value["q"], "escaped \" quote, then \\");
        assert_eq!(records[1].value["e"], "\\\"]");
        assert_eq!(records[2].value["u"], "] unicode");
        let numbers: Vec<u64> = records.iter().map(|r| r.position.record).collect();
        assert_eq!(numbers, vec![1, 2, 3]);
        // The offset is just after each element's closing brace.
        for record in &records {
            let end = usize::try_from(record.position.offset).unwrap();
            assert_eq!(&TRICKY[end - 1..end], "}");
            assert!(TRICKY[end..].trim_start().starts_with([',', ']']));
        }
    }

    #[test]
    fn gzipped_arrays_read_by_extension_and_by_magic_bytes() {
        let (gz, _) = read_bytes("x.json.gz", &gzip(TRICKY.as_bytes()));
        assert_eq!(gz.len(), 3);
        let (magic, _) = read_bytes("x.json", &gzip(TRICKY.as_bytes()));
        assert_eq!(values(&magic), values(&gz));
        let (sniffed, _) = read_bytes("export.dat", &gzip(TRICKY.as_bytes()));
        assert_eq!(values(&sniffed), values(&gz));
    }

    #[test]
    fn a_file_truncated_mid_element_gives_a_deadletter_for_it_then_ends() {
        let text = br#"[{"a":1}, {"a":2}, {"a": "cut here"#;
        let (records, dead) = read_bytes("x.json", text);
        assert_eq!(values(&records), vec![r#"{"a":1}"#, r#"{"a":2}"#]);
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].code, FailureCode::Malformed);
        assert_eq!(dead[0].line, 3);
        assert_eq!(dead[0].offset, 19);
        assert_eq!(dead[0].raw, r#"{"a": "cut here"#);
    }

    #[test]
    fn non_object_and_malformed_elements_are_deadletters_between_good_records() {
        let text = br#"[{"a":1}, 42, {"b":}, , "s", {"c":3}]"#;
        let (records, dead) = read_bytes("x.json", text);
        assert_eq!(values(&records), vec![r#"{"a":1}"#, r#"{"c":3}"#]);
        assert_eq!(records[1].position.record, 6);
        let summary: Vec<_> = dead
            .iter()
            .map(|d| (d.code, d.line, d.raw.as_str()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (FailureCode::NotAnObject, 2, "42"),
                (FailureCode::Malformed, 3, r#"{"b":}"#),
                (FailureCode::Malformed, 4, ""),
                (FailureCode::NotAnObject, 5, r#""s""#),
            ]
        );
        assert_eq!(dead[1].offset, 14);
    }

    #[test]
    fn empty_arrays_trailing_commas_and_unclosed_arrays_are_handled() {
        let (records, dead) = read_bytes("x.json", b"  [ ]  ");
        assert!(records.is_empty() && dead.is_empty());
        let (records, dead) = read_bytes("x.json", b"[{\"a\":1},]");
        assert_eq!(records.len(), 1);
        assert!(dead.is_empty());
        // Complete elements before the missing `]` still arrive.
        let (records, dead) = read_bytes("x.json", b"[{\"a\":1}, {\"a\":2}");
        assert_eq!(records.len(), 2);
        assert!(dead.is_empty());
    }

    #[test]
    fn data_after_the_array_is_a_deadletter() {
        let (records, dead) = read_bytes("x.json", b"[{\"a\":1}] {\"b\":2}\n");
        assert_eq!(records.len(), 1);
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].raw, "{\"b\":2}");
        assert_eq!(dead[0].offset, 10);
        assert!(dead[0].error.contains("after the end of the array"));
    }

    #[test]
    fn a_json_array_file_that_does_not_start_with_a_bracket_is_one_deadletter() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "x.txt", b"{\"a\":1}\n");
        let (records, dead) = read_all(FileSourceOptions {
            format: Some(FileFormat::JsonArray),
            ..options(dir.path(), "x.txt")
        })
        .unwrap();
        assert!(records.is_empty());
        assert_eq!(dead.len(), 1);
        assert!(
            dead[0].error.starts_with("expected `[`"),
            "{}",
            dead[0].error
        );
    }

    #[test]
    fn an_over_long_element_is_too_large_and_the_next_one_still_arrives() {
        let dir = tempfile::tempdir().unwrap();
        let long = format!("{{\"pad\":\"{}\",\"n\":[[[]]]}}", "z".repeat(5000));
        let text = format!("[{long},{{\"ok\":1}}]");
        write(dir.path(), "x.json", text.as_bytes());
        let (records, dead) = read_all(FileSourceOptions {
            max_record_bytes: 1000,
            ..options(dir.path(), "x.json")
        })
        .unwrap();
        assert_eq!(values(&records), vec![r#"{"ok":1}"#]);
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].code, FailureCode::TooLarge);
        assert_eq!(dead[0].offset, 1);
        assert!(
            dead[0].error.contains(&long.len().to_string()),
            "{}",
            dead[0].error
        );
    }

    #[test]
    fn elements_arrive_across_buffer_refills_and_batches() {
        let dir = tempfile::tempdir().unwrap();
        let body: Vec<String> = (0..30_000)
            .map(|i| format!("{{\"i\":{i},\"s\":\"{}\"}}", "ab\\\"c,]".repeat(10)))
            .collect();
        let text = format!("[{}]", body.join(",\n"));
        assert!(text.len() > 2 * 1024 * 1024);
        write(dir.path(), "x.json", text.as_bytes());
        let mut source = FileSource::open(FileSourceOptions {
            batch_rows: 7000,
            ..options(dir.path(), "x.json")
        })
        .unwrap();
        let mut n = 0i64;
        while let Some(batch) = crate::sources::Source::next_batch(&mut source).unwrap() {
            assert!(batch.records.len() <= 7000);
            assert!(batch.deadletters.is_empty());
            for record in batch.records {
                assert_eq!(record.value["i"], n);
                n += 1;
            }
        }
        assert_eq!(n, 30_000);
    }
}
