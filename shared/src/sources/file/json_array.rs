//! JSON arrays: a file holding one array of objects, read one element at a time.
//!
//! A small scanner walks the bytes once, tracking nesting depth, strings and escapes, to find
//! each top-level element's span; only the current element is held (and no more than the
//! maximum record size of it), then parsed on its own with serde_json.

use std::io::{BufRead, ErrorKind};
use std::sync::atomic::Ordering;

use super::compression::{Compression, InputStream, stream_error};
use super::reader::{FileContext, Item, KEPT_PREFIX_BYTES, RecordReader, clipped_raw};
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
    /// Read `stream` as a JSON array.
    pub(crate) fn new(ctx: FileContext, stream: InputStream) -> Self {
        JsonArrayReader {
            ctx,
            stream,
            offset: 0,
            scan: Scanner {
                state: State::Start,
                element_no: 0,
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
                self.end = pos + 1;
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
                clipped_raw(&self.element, self.end - self.start),
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
}
