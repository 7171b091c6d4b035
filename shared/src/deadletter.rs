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
    /// A record of a table merged by key (`write_policy: merge_by_key`) has no value of its
    /// own in a `primary_key` column: it is null or missing, an object or an array, or of a
    /// type the key column cannot hold.
    BadKey,
}

impl FailureCode {
    /// The code as it appears in logs and files.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::Malformed => "malformed",
            FailureCode::NotAnObject => "not_an_object",
            FailureCode::TooLarge => "too_large",
            FailureCode::Untypeable => "untypeable",
            FailureCode::BadKey => "bad_key",
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

/// The WAL namespace that carries a batch's rejected records, committed with the batch's rows
/// so they survive a crash exactly as data does: a part of kind
/// [`crate::wal::PartKind::Deadletters`]. `query` shows it as the table
/// `<pipeline>._deadletters` while it is in the WAL.
pub const WAL_NAMESPACE: &str = crate::wal::DEADLETTERS_PART;

/// The columns of a rejected record, in the WAL and in deadletter files: `id` (stable: a hash
/// of the source URI, offset and line), `namespace`, `record` (the original text), `error`,
/// `failure_code`, `event_time` (null: a rejected record has no trusted time),
/// `processed_time`, `source_uri`, `offset_key` (the line or row number) and
/// `offset_position` (the byte offset).
pub fn arrow_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    std::sync::Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("namespace", DataType::Utf8, true),
        Field::new("record", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, false),
        Field::new("failure_code", DataType::Utf8, false),
        Field::new("event_time", ts.clone(), true),
        Field::new("processed_time", ts, false),
        Field::new("source_uri", DataType::Utf8, false),
        Field::new("offset_key", DataType::Utf8, false),
        Field::new("offset_position", DataType::Int64, false),
    ]))
}

impl Deadletter {
    /// A stable id: the same record rejected again (a retry) gets the same id.
    pub fn id(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in self
            .source_uri
            .bytes()
            .chain(self.offset.to_le_bytes())
            .chain(self.line.to_le_bytes())
        {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{hash:016x}")
    }
}

/// `rejected` as a record batch of [`arrow_schema`], processed at `processed_micros` (Unix
/// microseconds).
pub fn to_record_batch(
    rejected: &[Deadletter],
    processed_micros: i64,
) -> Result<arrow::array::RecordBatch, arrow::error::ArrowError> {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, StringArray, TimestampMicrosecondArray};
    let strings = |f: &dyn Fn(&Deadletter) -> String| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rejected.iter().map(f)))
    };
    let columns: Vec<ArrayRef> = vec![
        strings(&|d| d.id()),
        Arc::new(StringArray::from_iter(
            rejected.iter().map(|d| d.namespace.as_deref()),
        )),
        strings(&|d| d.raw.clone()),
        strings(&|d| d.error.clone()),
        strings(&|d| d.code.as_str().to_owned()),
        Arc::new(TimestampMicrosecondArray::new_null(rejected.len()).with_timezone("UTC")),
        Arc::new(
            TimestampMicrosecondArray::from(vec![processed_micros; rejected.len()])
                .with_timezone("UTC"),
        ),
        strings(&|d| d.source_uri.clone()),
        strings(&|d| d.line.to_string()),
        Arc::new(Int64Array::from_iter_values(
            rejected
                .iter()
                .map(|d| i64::try_from(d.offset).unwrap_or(i64::MAX)),
        )),
    ];
    arrow::array::RecordBatch::try_new(arrow_schema(), columns)
}

#[cfg(test)]
mod wal_tests {
    use super::*;

    #[test]
    fn rejected_records_become_rows_with_stable_ids() {
        let dl = Deadletter {
            source_uri: "in/a.jsonl".into(),
            line: 3,
            offset: 40,
            raw: "{\"id\": broken".into(),
            error: "expected value".into(),
            code: FailureCode::Malformed,
            namespace: None,
        };
        let other = Deadletter {
            line: 4,
            ..dl.clone()
        };
        assert_eq!(dl.id(), dl.clone().id());
        assert_ne!(dl.id(), other.id());
        let batch = to_record_batch(&[dl, other], 1_700_000_000_000_000).unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.schema(), arrow_schema());
        assert_eq!(batch.column_by_name("event_time").unwrap().null_count(), 2);
    }
}
