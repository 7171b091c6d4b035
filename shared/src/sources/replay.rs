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
            let text = match serde_json::from_str::<serde_json::Value>(&line) {
                Ok(serde_json::Value::Object(mut o)) => match o.remove("record") {
                    Some(serde_json::Value::String(text)) => text,
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
                        uri: uri.clone(),
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
                Err(e) => batch.deadletters.push(rejected(&text, e.to_string())),
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
