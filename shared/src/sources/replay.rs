//! Replaying rejected records: the objects of a deadletter sink (`File` or `S3`) as a source.
//!
//! `skipprd deadletters replay` reads the pipeline's `b*.jsonl` objects the deadletter sink
//! wrote (`{path}/{pipeline}/` or `s3://{s3_bucket}/{s3_prefix}/{pipeline}/`; each line a
//! rejected record with its `record` text, which the user may have fixed) and sends each
//! `record` back through the pipeline: typed, committed to the WAL and delivered like any
//! other record. Each object is one batch; a record that still cannot be read becomes a
//! deadletter again (and lands in a new deadletter object).
//!
//! This source keeps no checkpoint of its own: an object counts as replayed once the WAL
//! batch holding its records is committed (the batch names it in a `_replayed` part), which
//! the caller checks before handing the list in (the deadletter sink's `pending`). The objects
//! are read through an [`ObjectTarget`] ([`crate::objects`]), the same the sink writes through.

use std::io::BufRead;
use std::sync::Arc;

use super::{Position, Progress, Source, SourceBatch, SourceError, SourceRecord};
use crate::deadletter::{Deadletter, FailureCode};
use crate::objects::ObjectTarget;

/// The deadletter objects as a source: one batch per object, read when its turn comes.
#[derive(Debug)]
pub struct ReplaySource {
    target: Arc<dyn ObjectTarget>,
    names: Vec<String>,
    next: usize,
    bytes_done: u64,
}

impl ReplaySource {
    /// A source over the objects `names` of `target`, in order.
    pub fn new(target: Arc<dyn ObjectTarget>, names: Vec<String>) -> Self {
        ReplaySource {
            target,
            names,
            next: 0,
            bytes_done: 0,
        }
    }

    /// The file name of the batch whose records come from `uri` (a path or `s3://` URI).
    pub fn file_name(uri: &str) -> String {
        crate::objects::file_name(uri).to_owned()
    }
}

impl Source for ReplaySource {
    fn next_batch(&mut self) -> Result<Option<SourceBatch>, SourceError> {
        let Some(name) = self.names.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        let uri = self.target.location_of(name);
        let bytes = match self.target.get(name) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Err(SourceError::Vanished { path: uri }),
            Err(source) => {
                return Err(SourceError::Deadletter { path: uri, source });
            }
        };
        let io = |source| SourceError::Io {
            path: uri.clone(),
            source,
        };
        let mut batch = SourceBatch::default();
        // One string for every record's position.
        let shared_uri: std::sync::Arc<str> = uri.as_str().into();
        let mut offset = 0u64;
        for (i, line) in bytes.as_slice().lines().enumerate() {
            let line = line.map_err(io)?;
            let line_no = i as u64 + 1;
            let start = offset;
            offset += line.len() as u64 + 1;
            if line.trim().is_empty() {
                continue;
            }
            let rejected = |raw: &str, error: String| Deadletter {
                source_uri: uri.clone(),
                line: line_no,
                offset: start,
                raw: Deadletter::clip_raw(raw),
                error,
                code: FailureCode::Malformed,
                namespace: None,
            };
            let (text, origin) = match serde_json::from_str::<serde_json::Value>(&line) {
                Ok(serde_json::Value::Object(mut o)) => match o.remove("record") {
                    Some(serde_json::Value::String(text)) => {
                        let origin = match o.remove("source_uri") {
                            Some(serde_json::Value::String(uri)) => Some(uri),
                            _ => None,
                        };
                        (text, origin)
                    }
                    _ => {
                        batch.deadletters.push(rejected(
                            &line,
                            "a deadletter line without a `record` text".to_owned(),
                        ));
                        continue;
                    }
                },
                _ => {
                    batch.deadletters.push(rejected(
                        &line,
                        "not a deadletter line (a JSON object)".to_owned(),
                    ));
                    continue;
                }
            };
            match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(serde_json::Value::Object(value)) => batch.records.push(SourceRecord {
                    value,
                    position: Position {
                        uri: std::sync::Arc::clone(&shared_uri),
                        offset,
                        record: line_no,
                    },
                    unparsed: None,
                    cells: None,
                    namespace: None,
                }),
                Ok(_) => batch.deadletters.push(Deadletter {
                    code: FailureCode::NotAnObject,
                    ..rejected(&text, "the record is not a JSON object".to_owned())
                }),
                Err(e) => batch
                    .deadletters
                    .push(rejected(&text, not_json(&text, origin.as_deref(), &e))),
            }
        }
        batch.bytes_read = offset;
        self.bytes_done += offset;
        Ok(Some(batch))
    }

    fn progress(&self) -> Progress {
        Progress {
            bytes_done: self.bytes_done,
            bytes_total: None,
            files_done: self.next as u64,
            files_total: Some(self.names.len() as u64),
            requests: 0,
            retries: 0,
        }
    }

    fn checkpoint(&self) -> Result<Vec<u8>, SourceError> {
        Ok(Vec::new())
    }
}

/// Why a `record` that is not JSON is rejected again. A record that does not even start as an
/// object is most likely a CSV row (the CSV source deadletters a row as its text, and the
/// deadletter keeps no header to read it back with): say how to replay it.
fn not_json(text: &str, origin: Option<&str>, error: &serde_json::Error) -> String {
    if text.trim_start().starts_with('{') {
        return error.to_string();
    }
    let from = origin.map_or_else(String::new, |uri| format!(" (rejected from `{uri}`)"));
    format!(
        "the record{from} is not JSON ({error}): `deadletters replay` reads each `record` as a JSON object, and a CSV row is kept as its text, without the header; to replay it, write it as an object of the columns, such as {{\"id\": \"2\", \"name\": \"short\"}}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::DirTarget;

    /// Regression: a deadletter of the CSV source (its `record` the row's text) was parsed as
    /// JSON on replay and rejected again as "trailing characters at line 1 column 2".
    #[test]
    fn a_csv_row_is_rejected_again_saying_how_to_replay_it_and_an_object_replays() {
        let dir = tempfile::tempdir().unwrap();
        let line = |record: &str| {
            serde_json::json!({
                "id": "x", "record": record, "error": "row has 2 fields but the header has 3",
                "failure_code": "malformed", "source_uri": "input/a.csv",
            })
            .to_string()
        };
        let text = [
            line("2,short,fixed"),
            line(r#"{"id": 2, "name": "short", "note": "fixed"}"#),
            line(r#"{"id": 3, oops}"#),
        ]
        .join("\n");
        std::fs::write(dir.path().join("b1.jsonl"), text).unwrap();
        let target: Arc<dyn ObjectTarget> = Arc::new(DirTarget::new(dir.path().to_path_buf()));
        let mut source = ReplaySource::new(target, vec!["b1.jsonl".to_owned()]);
        let batch = source.next_batch().unwrap().unwrap();
        assert_eq!(batch.records.len(), 1);
        assert_eq!(batch.records[0].value["note"], "fixed");
        assert_eq!(batch.deadletters.len(), 2);
        let csv = &batch.deadletters[0];
        assert_eq!((csv.line, csv.raw.as_str()), (1, "2,short,fixed"));
        assert!(
            csv.error
                .starts_with("the record (rejected from `input/a.csv`) is not JSON (")
                && csv
                    .error
                    .contains("a CSV row is kept as its text, without the header")
                && csv.error.contains("write it as an object of the columns"),
            "{}",
            csv.error
        );
        // A broken JSON record keeps the parser's own message.
        assert_eq!(batch.deadletters[1].line, 3);
        assert!(
            batch.deadletters[1]
                .error
                .starts_with("key must be a string"),
            "{}",
            batch.deadletters[1].error
        );
    }
}
