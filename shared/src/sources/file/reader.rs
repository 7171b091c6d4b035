//! What every per-format reader has in common: the item type, the reader trait and the helpers
//! that turn record text into records or deadletters.

use serde_json::Value;

use crate::deadletter::{Deadletter, FailureCode};
use crate::sources::error::lower_first;
use crate::sources::{Position, SourceError, SourceRecord, UnparsedJson};

/// One thing read from a file: a record or a deadletter.
#[derive(Debug)]
pub(crate) enum Item {
    /// A record that parsed.
    Record(SourceRecord),
    /// A record that did not.
    Dead(Deadletter),
}

/// A reader of one file in one format.
pub(crate) trait RecordReader: Send {
    /// The next record or deadletter; `Ok(None)` at the end of the file.
    fn next_item(&mut self) -> Result<Option<Item>, SourceError>;

    /// Input bytes consumed so far: bytes of the file on disk, exact for plain text formats,
    /// to the read granularity for compressed files, estimated for Parquet.
    fn consumed(&self) -> u64;

    /// Where a reader opened at it would continue right after the last item returned.
    fn resume_point(&self) -> Resume;

    /// Whether reading ended before a last record still being written, left for the next
    /// pass (a JSON-lines file's last line without its `\n`, cut off mid-value).
    fn held_back(&self) -> bool {
        false
    }
}

/// Where to start reading a file, and how to number what follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Resume {
    /// Bytes of the decompressed stream to skip; for Parquet, rows to skip.
    pub(crate) offset: u64,
    /// Records (lines, for line formats) already consumed: the numbering goes on from here.
    pub(crate) records: u64,
}

/// What a reader knows about the file it reads.
#[derive(Debug, Clone)]
pub(crate) struct FileContext {
    /// The file as shown to users and stored in positions.
    pub(crate) uri: std::sync::Arc<str>,
    /// The longest record accepted, in bytes.
    pub(crate) max_record_bytes: usize,
    /// The most memory a JSON record may take parsed, as [`parsed_size_bound`] estimates it.
    pub(crate) max_record_memory: u64,
    /// The lenient readings a record that is not strict JSON gets (see [`super::lenient`]).
    pub(crate) leniency: super::lenient::Leniency,
}

impl FileContext {
    /// A record at `record` (1-based) ending just before `end`.
    pub(crate) fn record(
        &self,
        value: serde_json::Map<String, Value>,
        end: u64,
        record: u64,
    ) -> Item {
        Item::Record(SourceRecord {
            value,
            position: Position {
                uri: self.uri.clone(),
                offset: end,
                record,
            },
            unparsed: None,
            cells: None,
            namespace: None,
        })
    }

    /// A deadletter for the record numbered `line` starting at `offset`.
    pub(crate) fn dead(
        &self,
        line: u64,
        offset: u64,
        raw: String,
        error: String,
        code: FailureCode,
    ) -> Item {
        Item::Dead(Deadletter {
            source_uri: self.uri.to_string(),
            line,
            offset,
            raw,
            error,
            code,
            namespace: None,
        })
    }

    /// Parse `text` as one JSON record: an object becomes a record, anything else a deadletter.
    pub(crate) fn parse_json(&self, text: &[u8], line: u64, start: u64, end: u64) -> Item {
        if let Some(dead) = self.too_much_memory(text, line, start) {
            return dead;
        }
        match parse_json_object(text) {
            Ok(map) => self.record(map, end, line),
            Err((error, FailureCode::Malformed)) if self.leniency.is_active() => {
                match parse_json_object(&self.leniency.rewrite(text)) {
                    Ok(map) => self.record(map, end, line),
                    // The strict parser's error says what is wrong with the record as written.
                    Err(_) => self.dead(line, start, raw_text(text), error, FailureCode::Malformed),
                }
            }
            Err((error, code)) => self.dead(line, start, raw_text(text), error, code),
        }
    }

    /// A record holding `text` unparsed (see
    /// [`super::FileSourceOptions::unparsed_json_lines`]).
    pub(crate) fn unparsed(&self, text: bytes::Bytes, line: u64, start: u64, end: u64) -> Item {
        if let Some(dead) = self.too_much_memory(&text, line, start) {
            return dead;
        }
        Item::Record(SourceRecord {
            value: serde_json::Map::new(),
            position: Position {
                uri: self.uri.clone(),
                offset: end,
                record: line,
            },
            unparsed: Some(UnparsedJson {
                text,
                start,
                deadletters_before: 0,
            }),
            cells: None,
            namespace: None,
        })
    }

    /// A deadletter for the JSON record `text` when, parsed, it would take more than
    /// [`FileContext::max_record_memory`]; `None` when it may be parsed.
    pub(crate) fn too_much_memory(&self, text: &[u8], line: u64, start: u64) -> Option<Item> {
        // No text this short can reach the limit: skip the scan.
        if (text.len() as u64).saturating_mul(PARSED_VALUE_BYTES + 1) <= self.max_record_memory {
            return None;
        }
        let (values, bytes) = parsed_size_bound(text);
        (bytes > self.max_record_memory).then(|| {
            self.dead(
                line,
                start,
                raw_text(text),
                format!(
                    "record of {} bytes holds about {values} JSON values, about {} once \
                     parsed, more than the {} a record may take",
                    text.len(),
                    binary_size(bytes),
                    binary_size(self.max_record_memory)
                ),
                FailureCode::TooLarge,
            )
        })
    }

    /// A deadletter for a record of `total` bytes, more than the maximum, of which `prefix`
    /// was kept.
    pub(crate) fn too_large(&self, prefix: &[u8], total: u64, line: u64, start: u64) -> Item {
        self.dead(
            line,
            start,
            clipped_raw(prefix, total),
            format!(
                "record is {total} bytes, more than the maximum of {} bytes",
                self.max_record_bytes
            ),
            FailureCode::TooLarge,
        )
    }
}

/// Parse `text` as one JSON object, or say why it is not one: the deadletter's error and code.
pub(crate) fn parse_json_object(
    text: &[u8],
) -> Result<serde_json::Map<String, Value>, (String, FailureCode)> {
    match serde_json::from_slice::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err((
            format!("expected a JSON object, found {}", json_kind(&other)),
            FailureCode::NotAnObject,
        )),
        Err(error) => Err((lower_first(&error.to_string()), FailureCode::Malformed)),
    }
}

/// The memory one parsed JSON value is taken to cost, beyond its text: a `serde_json` value
/// with ordered maps is 80 bytes, an object member adds its key and index entry, and vectors
/// grow by doubling. Measured: a 30 MiB line of `[0,0,...]` (15.7 million values) peaked at
/// 1.8 GB read into the lake, about 115 bytes a value.
pub(crate) const PARSED_VALUE_BYTES: u64 = 128;

const MIB: u64 = 1024 * 1024;

/// `bytes` in whole MiB, or in KiB below one MiB (so a small limit does not read "0 MiB").
fn binary_size(bytes: u64) -> String {
    if bytes >= MIB {
        format!("{} MiB", bytes.div_ceil(MIB))
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}

/// An upper bound on the values in the JSON text `text` and the memory they take parsed:
/// `(values, bytes)`. Every value but the first follows a `,`, `[`, `{` or `:` outside a
/// string, so counting those bounds the values (members' keys included); each is taken at
/// [`PARSED_VALUE_BYTES`], plus the text's own length for the strings' contents.
pub(crate) fn parsed_size_bound(text: &[u8]) -> (u64, u64) {
    let mut values: u64 = 1;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b',' | b'[' | b'{' | b':' => values += 1,
                _ => {}
            }
        }
    }
    let bytes = (text.len() as u64).saturating_add(values.saturating_mul(PARSED_VALUE_BYTES));
    (values, bytes)
}

/// Bytes kept of a record that is too large, for its deadletter.
pub(crate) const KEPT_PREFIX_BYTES: usize = Deadletter::MAX_RAW_BYTES;

/// Raw record text for a deadletter: lossily decoded and clipped.
pub(crate) fn raw_text(bytes: &[u8]) -> String {
    let end = bytes.len().min(KEPT_PREFIX_BYTES + 4);
    let text = String::from_utf8_lossy(&bytes[..end]);
    if end < bytes.len() {
        clipped_raw(&bytes[..end], bytes.len() as u64)
    } else {
        Deadletter::clip_raw(&text)
    }
}

/// The kept `prefix` of a record of `total` bytes, cut and marked like [`Deadletter::clip_raw`].
pub(crate) fn clipped_raw(prefix: &[u8], total: u64) -> String {
    let text = String::from_utf8_lossy(prefix);
    if (prefix.len() as u64) >= total && text.len() <= Deadletter::MAX_RAW_BYTES {
        return text.into_owned();
    }
    let mut end = text.len().min(Deadletter::MAX_RAW_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[cut, {total} bytes in all]", &text[..end])
}

/// "a number", "an array" and so on, for messages.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::super::FileSourceOptions;
    use super::*;

    fn context() -> FileContext {
        FileContext {
            uri: "x.jsonl".into(),
            max_record_bytes: 100,
            leniency: Default::default(),
            max_record_memory: FileSourceOptions::DEFAULT_MAX_RECORD_MEMORY,
        }
    }

    #[test]
    fn the_size_bound_counts_every_value_and_no_string_content() {
        assert_eq!(parsed_size_bound(b"{}").0, 2);
        // The object, two keys, two values.
        assert_eq!(parsed_size_bound(br#"{"a":1,"b":[2]}"#).0, 6);
        // Commas, brackets and colons inside strings are text, escaped quotes included.
        assert_eq!(parsed_size_bound(br#"{"a":"x,[{:\"],"}"#).0, 3);
        let (values, bytes) = parsed_size_bound(b"[0,0,0]");
        assert_eq!(values, 4);
        assert_eq!(bytes, 7 + 4 * PARSED_VALUE_BYTES);
    }

    #[test]
    fn a_record_that_would_take_too_much_memory_is_deadlettered_before_parsing() {
        let ctx = FileContext {
            leniency: Default::default(),
            max_record_memory: 64 * 1024,
            ..context()
        };
        // 1,000 tiny values: about 128 KB parsed, over the 64 KiB limit.
        let many = format!("{{\"a\":[{}]}}", vec!["0"; 1000].join(","));
        for item in [
            ctx.parse_json(many.as_bytes(), 7, 40, 40 + many.len() as u64),
            ctx.unparsed(
                bytes::Bytes::copy_from_slice(many.as_bytes()),
                7,
                40,
                40 + many.len() as u64,
            ),
        ] {
            match item {
                Item::Dead(d) => {
                    assert_eq!(d.code, FailureCode::TooLarge);
                    assert_eq!((d.line, d.offset), (7, 40));
                    assert!(
                        d.error.contains("holds about 1003 JSON values"),
                        "{}",
                        d.error
                    );
                    assert!(
                        d.error.contains("more than the 64 KiB a record may take"),
                        "{}",
                        d.error
                    );
                    assert!(d.raw.starts_with("{\"a\":[0,0"), "{}", d.raw);
                }
                Item::Record(_) => panic!("1,000 values do not fit in 64 KiB"),
            }
        }
        // As long a record of one string is fine: its text is all it takes.
        let long = format!("{{\"a\":\"{}\"}}", "x".repeat(many.len()));
        assert!(matches!(
            ctx.parse_json(long.as_bytes(), 1, 0, 1),
            Item::Record(_)
        ));
    }

    #[test]
    fn objects_become_records_and_other_values_deadletters() {
        let ctx = context();
        assert!(matches!(
            ctx.parse_json(b"{\"a\":1}", 1, 0, 8),
            Item::Record(_)
        ));
        match ctx.parse_json(b"[1]", 3, 10, 14) {
            Item::Dead(d) => {
                assert_eq!(d.code, FailureCode::NotAnObject);
                assert_eq!((d.line, d.offset), (3, 10));
                assert_eq!(d.error, "expected a JSON object, found an array");
            }
            Item::Record(_) => panic!("an array is not a record"),
        }
        match ctx.parse_json(b"{oops", 1, 0, 5) {
            Item::Dead(d) => {
                assert_eq!(d.code, FailureCode::Malformed);
                assert_eq!(d.raw, "{oops");
                assert!(d.error.starts_with("key must be a string"), "{}", d.error);
            }
            Item::Record(_) => panic!("bad JSON is not a record"),
        }
    }

    #[test]
    fn clipped_raw_marks_a_cut_prefix_with_the_full_length() {
        assert_eq!(clipped_raw(b"abc", 3), "abc");
        assert_eq!(clipped_raw(b"abc", 10), "abc…[cut, 10 bytes in all]");
        let long = vec![b'x'; KEPT_PREFIX_BYTES + 10];
        let raw = raw_text(&long);
        assert!(raw.ends_with(&format!("[cut, {} bytes in all]", long.len())));
    }
}
