//! Replaying rejected records: the files of a `File` deadletter sink as a source.
//!
//! `skipprd deadletters replay` reads `{path}/{pipeline}/b*.jsonl` (the files the deadletter
//! sink wrote, each line a rejected record with its `record` text, which the user may have
//! fixed) and sends each `record` back through the pipeline: typed, committed to the WAL and
//! delivered like any other record. Each file is one batch; a record that still cannot be
//! read becomes a deadletter again (and lands in a new deadletter file).
//!
//! This source keeps no checkpoint of its own: a file counts as replayed once the WAL batch
//! holding its records is committed (the batch names it in a `_replayed` part), which the
//! caller checks before handing the file list in.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use super::{Position, Progress, Source, SourceBatch, SourceError, SourceRecord};
use crate::deadletter::{Deadletter, FailureCode};

/// The deadletter files of a pipeline not replayed yet, in order.
pub fn pending_files(
    dir: &Path,
    replayed: &std::collections::BTreeSet<String>,
) -> Result<Vec<PathBuf>, SourceError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(SourceError::Io {
                path: dir.display().to_string(),
                source,
            });
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| SourceError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('b') && name.ends_with(".jsonl") && !replayed.contains(&name) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// The deadletter files as a source: one batch per file.
#[derive(Debug)]
pub struct ReplaySource {
    files: Vec<PathBuf>,
    next: usize,
    bytes_done: u64,
}

impl ReplaySource {
    /// A source over `files`, in order.
    pub fn new(files: Vec<PathBuf>) -> Self {
        ReplaySource {
            files,
            next: 0,
            bytes_done: 0,
        }
    }

    /// The file name of the batch whose records come from `uri`.
    pub fn file_name(uri: &str) -> String {
        Path::new(uri)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

impl Source for ReplaySource {
    fn next_batch(&mut self) -> Result<Option<SourceBatch>, SourceError> {
        let Some(path) = self.files.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        let uri = path.display().to_string();
        let io = |source| SourceError::Io {
            path: uri.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let mut batch = SourceBatch::default();
        let mut offset = 0u64;
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
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
            files_total: Some(self.files.len() as u64),
        }
    }

    fn checkpoint(&self) -> Result<Vec<u8>, SourceError> {
        Ok(Vec::new())
    }
}
