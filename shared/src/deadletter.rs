//! Deadletter records: input that could not be read or typed.
//!
//! A malformed record never stops a source. It becomes a [`Deadletter`] that carries enough to
//! find and fix it: the source URI, the line (or row) number, the byte offset, the raw text and
//! the error. With no deadletter sink configured they are counted and logged, never silently
//! dropped.

use serde::{Deserialize, Serialize};

/// Why a record was rejected. Stable names: they appear in logs, JSON events and deadletter files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// The record's text is not valid in its format (bad JSON, a CSV row with the wrong number of fields).
    Malformed,
    /// The record parsed but is not an object/row (for example a bare `42` in a JSON-lines file).
    NotAnObject,
    /// The record is longer than the source's maximum record size.
    TooLarge,
    /// A value could not be typed into its column or any sibling column.
    Untypeable,
}

impl FailureCode {
    /// The code as it appears in logs and files.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::Malformed => "malformed",
            FailureCode::NotAnObject => "not_an_object",
            FailureCode::TooLarge => "too_large",
            FailureCode::Untypeable => "untypeable",
        }
    }
}

/// One rejected record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deadletter {
    /// Where the record came from: a file path or an object URI.
    pub source_uri: String,
    /// 1-based line number for line formats, 1-based row or element number otherwise.
    pub line: u64,
    /// Byte offset of the record's first byte in the (decompressed) stream; row index for Parquet.
    pub offset: u64,
    /// The record's original text, cut to [`Deadletter::MAX_RAW_BYTES`] (on a char boundary).
    pub raw: String,
    /// What was wrong, in one line.
    pub error: String,
    /// Machine-readable reason.
    pub code: FailureCode,
    /// The namespace the record was meant for, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl Deadletter {
    /// The longest raw text kept in a deadletter record; longer text is cut and marked.
    pub const MAX_RAW_BYTES: usize = 64 * 1024;

    /// Cut `raw` to at most [`Self::MAX_RAW_BYTES`] on a char boundary, marking the cut.
    pub fn clip_raw(raw: &str) -> String {
        if raw.len() <= Self::MAX_RAW_BYTES {
            return raw.to_owned();
        }
        let mut end = Self::MAX_RAW_BYTES;
        while !raw.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…[cut, {} bytes in all]", &raw[..end], raw.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_raw_keeps_short_text_and_cuts_long_text_on_a_char_boundary() {
        assert_eq!(Deadletter::clip_raw("abc"), "abc");
        let long = "é".repeat(Deadletter::MAX_RAW_BYTES);
        let clipped = Deadletter::clip_raw(&long);
        assert!(clipped.len() < long.len());
        assert!(clipped.contains("bytes in all"));
    }
}
